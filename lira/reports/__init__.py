"""What lira's statistics produce, as files: the run folder (run_folder.py, the one module that reads and
writes its files), report writers, tables and plots. The statistics in lira/ never import this package."""
