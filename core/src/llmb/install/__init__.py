"""The install directory: what ``llmb install`` sets up and how a cluster is configured.

installer.py        ``llmb install``: the steps, in order, each safe to repeat
images.py           container images (enroot ``.sqsh`` files) and their references
hf.py               Hugging Face tokenizer/config files the frameworks need offline
worker_library.py   llmb as the nodes' Python imports it (for bare and container runs)
cluster_config.py   ``$LLMB_INSTALL/cluster.yaml``: read, written, shown (``llmb config``)
cluster_settings.py the cluster settings, each with its flag, variable and file key
value_checks.py     the one check of each kind of value, whichever way it is given
"""
