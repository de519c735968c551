"""dpcausal: differentially private causal inference from the command line."""

__version__ = "0.1.0"
