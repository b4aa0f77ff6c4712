"""`python -m pearl_cli ...`: the same as the `pearl` command."""
from pearl_cli.main import app

app()
