"""The human report of a run: one self-contained HTML page.

`build_report(ledger, ops_root, run_id)` collects a ReportModel from the
ledger (the truth) and the run's artifacts; `render_html(model)` turns it
into a page with inline SVG and PNG data URIs, so it can be mailed or
attached to a ticket as one file.
"""
