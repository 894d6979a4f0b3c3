"""dome mask-rule deck (Python, klayout.db): minimum width, minimum space and
minimum area on one layer; the same rules and markers as mask_rules.drc.

Params (strings): layer, datatype, min_width, min_space (microns), min_area
(square microns). Run through run_drc_script with script_type "python".
"""


def run(deck):
    p = deck.params
    region = deck.input(int(p.get("layer", "1")), int(p.get("datatype", "0")))
    deck.output(region.width_check(deck.um(p.get("min_width", "0.1"))), "min_width", "width below min_width")
    deck.output(region.space_check(deck.um(p.get("min_space", "0.1"))), "min_space", "space below min_space")
    deck.output(region.with_area(None, deck.um2(p.get("min_area", "0.01")), False), "min_area",
                "area below min_area")
