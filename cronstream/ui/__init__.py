"""`cronstream ui`: the operator's web dashboard, served beside the HTTP API.

Server-rendered pages (FastAPI + Jinja2; every asset in the package, charts drawn as
SVG on the server, no CDN): a live overview from the stack's Prometheus, the jobs with
search and filters, a job's page (definition, next fires, recent runs with a duration
chart, failures, actions), run search and a dead-letter browser with replay. Reads go
through the same backend as the API (``cronstream.api``). Every page asks for a sign-in
with an API token (a session on the server, its random id in an HttpOnly cookie); a
tenant's sees only that tenant's jobs, runs and dead letters and acts on them through
the admission, like the API. ``--anonymous`` opens the pages read-only without one.
"""
