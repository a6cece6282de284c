"""`cronstream ui`: the operator's web dashboard, served beside the HTTP API.

Server-rendered pages (FastAPI + Jinja2; every asset in the package, charts drawn as
SVG on the server, no CDN): a live overview from the stack's Prometheus, the jobs with
search and filters, a job's page (definition, next fires, recent runs with a duration
chart, failures, actions), run search and a dead-letter browser with replay. Reads go
through the same backend as the API (``cronstream.api``); without a token the pages are
read-only, with one (kept in an HttpOnly cookie after the sign-in form) a tenant sees
only its own jobs and acts on them through the admission, like the API.
"""
