"""gradguard's web layer: the pages people look at and the badges their READMEs show.

    app.py           the ASGI app `gradguard serve` runs: the service API with the web layer mounted
    site.py          mount(): pages, badges, static files, security headers (CSP)
    routes.py        pages: projects, a project, a run (live status), a rule's history, the check catalogue
    badge_routes.py  /badge/{project}.svg and .json from the cached latest verdict
    badges.py        the flat SVG and the shields.io endpoint document (pure functions)
    view.py          a report and its files -> what the run page shows (grid, sources, safety matrix)
    chart.py         the history chart, SVG drawn on the server
    queries.py       read queries beyond service.crud (latest verdict per branch, history, rule over commits)
    templating.py    the Jinja2 environment (autoescape everywhere)
"""

__all__: list[str] = []
