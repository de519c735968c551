"""One module per command. Pure: no typer, yaml or pyarrow; noise only through mechanisms."""
