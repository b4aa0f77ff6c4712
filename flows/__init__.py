from prefect.settings import PREFECT_API_URL

if not PREFECT_API_URL.value():  # a flow run here starts Prefect's temporary API: have it start one that dies with us
    from runs.prefect_api import temporary_api

    temporary_api()
