"""Reproduces a known fault (session 35; README "network" section), not registered with ctest:
one 32-byte BASP header that CAF 0.17 accepts -- a server_handshake (operation byte 0) with
non-zero operation data and a payload length of 0x92533f54 -- sent to the router's client port
of a two-node CPU cluster (toy runner) takes the cluster down: the executor node reports the
coordinator down (remote_link_unreachable) and exits, and the next request fails. Exit status
0 when the cluster still serves afterwards (the fault is fixed), 1 when it does not.

    python3 tests/integration/repro_basp_header.py build/bin/deepinfer
"""
import os
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_util as cu  # noqa: E402

HEADER = bytes.fromhex("00c4e90a92533f54aa47df7fd9a8be1697721a5a8202f3e958af797659fce489")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    cu.BINARY = os.path.abspath(sys.argv[1])
    work = tempfile.mkdtemp(prefix="deepinfer-basp-")
    ports = cu.free_ports(3)
    c = cu.Cluster(work, "basp", cu.cluster_toml("basp", ports[0], ports[1:], [(0, [1])], "", runner="toy"))
    try:
        host, port = c.address.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(HEADER)
            time.sleep(0.05)
        p, out = c.client_json_lines("--prompt-ids", "0,5,6,7", "--max-tokens", "4", "--temperature", "0",
                                     timeout=60)
        served = p.returncode == 0 and out and out[0].get("finish_reason") == "length"
        print("served after the header" if served else f"NOT served after the header: {out[:1]}")
        if not served:
            print("\n".join(line for line in c.read_log().splitlines() if "error" in line))
        return 0 if served else 1
    finally:
        c.stop()


if __name__ == "__main__":
    sys.exit(main())
