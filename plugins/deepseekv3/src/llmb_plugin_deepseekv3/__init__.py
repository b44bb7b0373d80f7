"""DeepSeek-V3 671B and Kimi-K2 1T for llmb: the hooks live in ``plugin``, the data in
``workload.yaml``, the torch model in ``model`` (imported only when a model is built)."""
