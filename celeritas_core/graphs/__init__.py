"""The graph model: graphs, op keys, clusters and their link topology, placements, orders."""
