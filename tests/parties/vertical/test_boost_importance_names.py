"""importance.png names a guest's columns as the job knows them, never by a bare local index."""

from __future__ import annotations

from dataclasses import replace

from sklearn.datasets import load_breast_cancer

from privfl.parties.vertical.secureboost.report import guest_column
from privfl.runs.kits import demo_job


def test_demo_columns_get_their_global_index_and_name() -> None:
    job = demo_job()
    first = job.party("guest-1").columns[0]
    name = str(load_breast_cancer().feature_names[first])
    assert guest_column(job, "guest-1", 0) == f"column {first} ({name})"


def test_feature_names_in_the_job_win() -> None:
    job = demo_job()
    spec = replace(job.party("guest-1"), features=("glucose", "bmi"), columns=())
    job = replace(job, parties={**job.parties, "guest-1": spec})
    assert guest_column(job, "guest-1", 1) == "bmi"


def test_a_guests_own_csv_stays_a_local_index() -> None:
    job = demo_job()
    spec = replace(job.party("guest-1"), data="labs.csv")
    job = replace(job, parties={**job.parties, "guest-1": spec})
    assert guest_column(job, "guest-1", 3) == "local column 3"


def test_a_column_outside_the_table_falls_back_to_its_local_index() -> None:
    job = demo_job()
    spec = replace(job.party("guest-1"), columns=(40, 41))
    job = replace(job, parties={**job.parties, "guest-1": spec})
    assert guest_column(job, "guest-1", 1) == "local column 1"
