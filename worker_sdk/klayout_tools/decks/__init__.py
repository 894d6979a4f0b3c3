"""Built-in DRC decks shipped with dome (data files; the .py deck is run, not imported)."""
