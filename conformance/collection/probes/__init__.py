"""Programs the suite sends to a node (on stdin) and runs there with the node's python3: they only
read, write nothing on the node, and print one JSON document."""
