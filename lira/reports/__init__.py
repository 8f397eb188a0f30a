"""What lira's statistics produce, as files: report writers, tables and plots, the synthetic run and the checked
population, each reading and writing through run_folder (the bottom package that names, reads and writes a run
folder's files). The statistics in lira/ never import this package."""
