"""`dome serve`: a read-only web page over the ledger (runs, a live run page by server-sent
events, /metrics), drawn by the report's own code."""
