"""`python -m adapter_bert`: says whether the installed TensorFlow and tf-keras fit.

Prints the installed versions and "OK", or the one-line problem and the command that
fixes it (exit status 1). TensorFlow is not imported.
"""

import sys

from adapter_bert.install_check import main

sys.exit(main())
