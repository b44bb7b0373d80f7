"""The JOB of a listing's runs (``llmb.results.experiments.JobIds``): the llmb job a run names, or whose
attempt its Slurm job id was; each job's record read once however many runs name it."""

from __future__ import annotations

import json

import pytest
from llmb.results.experiments import JobIds, accepted_job_id
from llmb.runs import jobs


def _job(install, job_id: str, *slurm_ids: str, text: str | None = None) -> None:
    directory = install / "jobs" / job_id
    directory.mkdir(parents=True)
    record = {
        "id": job_id,
        "backend": "slurm",
        "workload": "llama31",
        "experiment": "e",
        "run_dir": str(install / "runs" / job_id),
        "log": str(install / "runs" / job_id / "log-e.out"),
        "ranks": 8,
        "submitted_at": "2026-12-01T00:00:00+00:00",
        "details": {
            "attempts": [{"attempt": n, "slurm_id": s} for n, s in enumerate(slurm_ids, 1)]
        },
    }
    (directory / "job.json").write_text(text if text is not None else json.dumps(record))


@pytest.fixture
def install(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMB_INSTALL", str(tmp_path))
    _job(tmp_path, "slurm-aaaaaa", "111", "222")
    _job(tmp_path, "slurm-bbbbbb", "333")
    _job(tmp_path, "slurm-cccccc", "444", text='{"id": "slurm-cccccc"}')  # lacks the job's fields
    return tmp_path


def test_a_run_names_its_llmb_job_or_a_slurm_job_of_one_of_its_attempts(install):
    ids = JobIds()
    asked = {
        "slurm-aaaaaa": "slurm-aaaaaa",
        "111": "slurm-aaaaaa",
        "222": "slurm-aaaaaa",  # the second attempt's
        "333": "slurm-bbbbbb",
        "slurm-cccccc": None,  # a damaged record names no job a command takes
        "444": None,
        "999": None,  # a number in a foreign log's name: no job of llmb's
        "slurm-dddddd": None,
        "../slurm-aaaaaa": None,
        "": None,
        None: None,
    }
    for job_id, job in asked.items():
        assert ids.accepted(job_id) == job, job_id
        assert accepted_job_id(job_id) == job, job_id  # one run asked alone: the same answer


def test_a_listing_reads_each_job_record_once(install, monkeypatch):
    read = []
    real = jobs.read_job
    monkeypatch.setattr(jobs, "read_job", lambda job_id: read.append(job_id) or real(job_id))
    ids = JobIds()
    for _ in range(100):  # a hundred runs of each, as a listing of many attempts asks
        assert ids.accepted("slurm-aaaaaa") == "slurm-aaaaaa"
        assert ids.accepted("333") == "slurm-bbbbbb"
        assert ids.accepted("999") is None
    # the llmb job once; for the Slurm ids, every job once (their attempts gathered at the first number)
    assert sorted(read) == ["slurm-aaaaaa", "slurm-aaaaaa", "slurm-bbbbbb", "slurm-cccccc"]
