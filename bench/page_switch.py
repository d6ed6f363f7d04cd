"""Does a page switch right after a section's control changed open the new page? Prints one line per try.

A student changes a control inside a section of the Masks page (a keyed fragment: only that section reruns),
then clicks another page. Streamlit sends the control's state with the page switch, its on_change ran again,
and its rerun of the Masks sections answered the switch: the navigation kept naming Masks (about one switch
in sixty in a class; bench/classroom.py counted them as "the navigation shows another page"). Each try here
opens Masks with a fresh session, makes three random changes (seeded, as bench/classroom.py's students do),
then switches to Retrieval and Positions, and checks that the navigation names each.

    python bench/page_switch.py --url http://127.0.0.1:8501 --tries 20
"""

from __future__ import annotations

import classroom as room  # noqa: I001 - bench/classroom.py (this script's folder); it patches the standard library first

import argparse  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402

MODEL = "sort-peek-encdec"


def one_try(url: str, seed: int, timeout: float) -> list[str]:
    """The page switches of one try that did not open their page, as 'seed S: /page (navigation says /other)'."""
    rng = random.Random(seed)
    s = room.Session(url, timeout)
    wrong = []
    try:
        s.connect()
        s.rerun("open", "masks", query=f"model={MODEL}", page_name="masks", page_hash="")
        for _ in range(3):
            picked = s.click(rng)
            if picked is not None:
                fragment = s.fragment_of(picked[1])
                s.rerun("section" if fragment else "click", "masks", widgets=(picked[1],), fragment_id=fragment)
        for target in ("retrieval", "positions"):
            s.rerun("page", target, query=f"model={MODEL}", page_hash=s.pages[target])
            if s.pages.get(target) != s.page_hash:
                shown = next((page for page, h in s.pages.items() if h == s.page_hash), "?")
                wrong.append(f"seed {seed}: /{target} (navigation says /{shown})")
                break
    finally:
        s.close()
    return wrong


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True, help="a running server, e.g. http://127.0.0.1:8501")
    ap.add_argument("--tries", type=int, default=20, help="seeds 0..tries-1 (default 20)")
    ap.add_argument("--seeds", help="comma-separated seeds instead of --tries")
    ap.add_argument("--timeout", type=float, default=120, help="seconds one run may take")
    args = ap.parse_args(argv)
    seeds = [int(x) for x in args.seeds.split(",")] if args.seeds else list(range(args.tries))
    wrong = [line for seed in seeds for line in one_try(args.url.rstrip("/"), seed, args.timeout)]
    for line in wrong:
        print("wrong page:", line)
    print(f"{len(seeds)} tries, {len(wrong)} page switches answered by the old page")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
