"""Reference side of benches/match.rs: HTCondor's classad2 matching one request
against every offer in a file (one ClassAd per line), through the Python binding.

Usage: classad2_match.py REQUEST_FILE OFFERS_FILE REPEATS
Prints one JSON object: offers, matches, rank_sum, best seconds of REPEATS runs.
"""
import json
import sys
import time

import classad2


def main():
    req_src, offers_path, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3])
    request = classad2.ClassAd(open(req_src).read())
    rank = request.lookup("Rank")
    with open(offers_path) as f:
        offers = [classad2.ClassAd(line) for line in f if line.strip()]
    best = None
    for _ in range(repeats):
        matches = 0
        rank_sum = 0.0
        t0 = time.perf_counter()
        for offer in offers:
            # a.matches(b) evaluates b's Requirements against a.
            if offer.matches(request):
                matches += 1
                r = rank.eval(request, offer)
                if isinstance(r, (int, float)) and not isinstance(r, bool):
                    rank_sum += r
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    print(json.dumps({"offers": len(offers), "matches": matches, "rank_sum": rank_sum, "seconds": best}))


main()
