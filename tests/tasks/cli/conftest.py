"""sesame-score reads SQuAD files: the QA tests' fixtures (real dev questions, a JSON file writer)."""

from tests.tasks.qa.conftest import real_dev_v1, real_dev_v2, write_json  # noqa: F401
