import os
import lit.formats

config.name = "kiln"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".test"]
config.test_source_root = config.kiln_source
config.test_exec_root = os.path.dirname(__file__) if "__file__" in dir() else config.kiln_source
config.substitutions.append(("%kiln", config.kiln))
config.substitutions.append(("FileCheck", config.filecheck))
