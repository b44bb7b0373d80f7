"""Results: runs' logs parsed into rows, stored, analysed, compared and archived.

scan.py         finding experiments' logs and reading them safely (regular files, bounded)
lines.py        the one prefix stage every log reader takes its lines from
formats/        the log readers, one module per format (Megatron, NeMo 2, torchtitan, NCCL, ...)
identity.py     what ran: the log, the records and the name held against each other
record_values.py  the values a record may hold, checked where it is read
experiments.py  an experiment directory's name and recipe read back
records.py      the result row and its statuses
analyze.py      the statistics window and the metrics of one run
collect.py      every run under the install, rescanned when its log changed
store.py        the results database (SQLite)
compare.py      rows against the published figures or a baseline
export.py       CSV / JSON output
archive.py      ``llmb archive``: experiments packed without profiles, traces or checkpoints
"""
