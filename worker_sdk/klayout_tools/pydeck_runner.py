"""Child-process runner for Python DRC decks (script_type "python").

Run as `python -I pydeck_runner.py SPEC.json`: it imports only the standard
library and klayout, reads the exported layout copy, runs the deck's
`run(deck)` function and saves the markers as a .lyrdb report. The deck gets
a small object mirroring the Ruby DRC verbs it needs:

    deck.layout, deck.top_cell, deck.dbu, deck.params (dict of str)
    deck.input(layer, datatype=0) -> klayout.db.Region (flat, merged semantics)
    deck.output(data, category, description="")   data: Region, Edges or EdgePairs
    deck.um(value) -> dbu integer;  deck.um2(value) -> dbu^2 integer
"""
from __future__ import annotations

import json
import runpy
import sys

import klayout.db as kdb
import klayout.rdb as krdb


class Deck:
    def __init__(self, layout: kdb.Layout, top: kdb.Cell, params: dict[str, str], report: krdb.ReportDatabase):
        self.layout = layout
        self.top_cell = top
        self.dbu = layout.dbu
        self.params = params
        self._report = report
        self._rcell = report.create_cell(top.name)
        self._categories: dict[str, krdb.RdbCategory] = {}

    def um(self, value: float) -> int:
        return int(round(float(value) / self.dbu))

    def um2(self, value: float) -> int:
        return int(round(float(value) / (self.dbu * self.dbu)))

    def input(self, layer: int, datatype: int = 0) -> kdb.Region:
        li = self.layout.find_layer(int(layer), int(datatype))
        if li is None:
            return kdb.Region()
        return kdb.Region(self.top_cell.begin_shapes_rec(li))

    def output(self, data, category: str, description: str = "") -> None:
        cat = self._categories.get(category)
        if cat is None:
            cat = self._report.create_category(category)
            cat.description = description
            self._categories[category] = cat
        self._report.create_items(self._rcell.rdb_id(), cat.rdb_id(), kdb.CplxTrans(self.dbu), data)


def main(spec_path: str) -> int:
    with open(spec_path, encoding="utf-8") as fh:
        spec = json.load(fh)
    layout = kdb.Layout()
    layout.read(spec["input"])
    top = layout.cell(spec["top_cell"])
    if top is None:
        print(f"top cell {spec['top_cell']!r} not in the layout copy", file=sys.stderr)
        return 3
    report = krdb.ReportDatabase("python deck")
    report.generator = f"dome python deck: {spec['script']}"
    report.top_cell_name = top.name
    deck = Deck(layout, top, dict(spec["params"]), report)
    namespace = runpy.run_path(spec["script"], run_name="__dome_deck__")
    run = namespace.get("run")
    if not callable(run):
        print("python deck defines no run(deck) function", file=sys.stderr)
        return 3
    run(deck)
    report.save(spec["output"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
