"""The door of flow parameters: no URL with credentials in any of them (issue 64, section 3).

Prefect keeps a run's parameters in plain text in its database, and logs them when they fail its
validation, so the refusal comes before the run is stored, in the one rule of
`pearl_redact.refuse_userinfo`, at each place a run can start:

- a deployment run: the server checks the parameters against the deployment's JSON schema before
  it creates the run; every parameter that is a string or holds strings is annotated `Text`
  or `Settings` (or, in a settings model, carries `no_userinfo_schema()`), whose schema says that no
  string in it has userinfo (tests/test_doors_urls.py walks each deployed flow's schema);
- a call in this process (a flow from Python, or a subflow): `flow` below makes flows whose call
  checks its parameters as Prefect would store them, before Prefect creates the run;
- a deployment run that a client asked the server not to check (`enforce_parameter_schema=False`):
  its worker checks the parameters before any work (the run is stored by then: nothing in the
  project can stop that).

The refusal is one line that names the parameter, never its value.
"""
from __future__ import annotations

from typing import Annotated, Any

from prefect import Flow
from prefect.utilities.callables import get_call_parameters

from pearl_redact import no_userinfo_schema, refuse_userinfo


class _NoUserinfo:
    """Pydantic metadata: the field's JSON schema also says that no string in it has userinfo (the
    schema alone: pydantic itself does not check it, as its error would quote the value)."""

    def __init__(self, depth: int = 0):
        self.schema = no_userinfo_schema(depth)

    def __get_pydantic_json_schema__(self, core_schema, handler):
        return {**handler(core_schema), **self.schema}


Text = Annotated[str, _NoUserinfo()]  # any free string of a parameter: a path, a URL, a model spec, a name
Settings = Annotated[dict, _NoUserinfo(depth=4)]  # a free dict of settings: its strings, four levels deep


def refuse_credentials(parameters: dict[str, Any]) -> None:
    """The first parameter (by name) that holds a URL with userinfo, refused in one line."""
    for name, value in parameters.items():
        refuse_userinfo(value, f"parameter {name!r}")


class _CheckedFlow(Flow):
    def __call__(self, *args, return_state: bool = False, wait_for=None, **kwargs):
        # as Prefect would store them (pydantic models as dicts), before run_flow creates the run
        refuse_credentials(self.serialize_parameters(get_call_parameters(self.fn, args, kwargs)))
        return super().__call__(*args, return_state=return_state, wait_for=wait_for, **kwargs)

    def validate_parameters(self, parameters: dict[str, Any]) -> dict[str, Any]:
        refuse_credentials(parameters)  # a worker's deployment run, before pydantic logs the values it refuses
        return super().validate_parameters(parameters)


def flow(**options):
    """`prefect.flow(**options)`, for a flow whose parameters pass `refuse_credentials` first."""
    return lambda fn: _CheckedFlow(fn=fn, **options)
