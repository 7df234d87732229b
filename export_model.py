# export_model.py for a clone: `python export_model.py --helpshort`.
# The runner is the module adapter_bert/export_model.py; installed, it runs from any
# directory as `python -m adapter_bert.export_model`. (No docstring here: --helpshort shows
# the runner's.)

from adapter_bert import export_model

if __name__ == "__main__":
    export_model.run()
