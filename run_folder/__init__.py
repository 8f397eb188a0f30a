"""The run folder, at the bottom of the house: the names of its files (run_folder.names), the one reader and writer of
them (run_folder.runs), atomic writes of results (run_folder.atomic), a set of a run's files replaced as one
(run_folder.staging) and the errors every layer raises (run_folder.errors). It imports nothing of the project's, so
every package may import it:

  import run_folder
  run = run_folder.load_run(run_dir)
  run_folder.save_json(path, result)
"""

from run_folder import names
from run_folder import staging
from run_folder.atomic import (check_writable, copy_file, ctrl_c_held, remove_files, save_bytes, save_csv,
                               save_figure, save_json, save_npy, save_text, standard_json)
from run_folder.names import (POPULATION_FILES, RUN_FILES, config_path, group_paths, groups, population_group_path,
                              stat_path)
from run_folder.runs import (Run, check_complete, check_no_run, finished_groups, load_config, load_json, load_npy,
                             load_population, load_run, load_stacked, population_fingerprint, run_fingerprint,
                             save_config, save_run)

__all__ = [
    "names", "staging", "Run", "check_complete", "check_no_run", "check_writable", "config_path", "copy_file",
    "ctrl_c_held", "finished_groups", "group_paths", "groups", "load_config", "load_json", "load_npy",
    "load_population", "load_run", "load_stacked", "population_fingerprint", "population_group_path", "remove_files",
    "run_fingerprint", "save_bytes", "save_config", "save_csv", "save_figure", "save_json", "save_npy", "save_run", "save_text",
    "standard_json", "stat_path", "POPULATION_FILES", "RUN_FILES",
]
