"""pearl_model.packages: an installed package's files found without importing it, or the caller's error."""
from __future__ import annotations

import pytest

from pearl_model.packages import installed_dir


def test_an_installed_package_gives_its_directory_and_a_missing_one_the_callers_error():
    assert (installed_dir("gensim", RuntimeError, "unused") / "__init__.py").is_file()

    class Missing(FileNotFoundError):
        pass

    with pytest.raises(Missing, match="pip install nothing-here==1"):
        installed_dir("no_such_package_pearl", Missing, "needs pip install nothing-here==1")
