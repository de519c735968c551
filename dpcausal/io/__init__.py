"""Reading tables and writing outputs. No privacy logic lives here."""
