"""Everything that is the same for every framework; importing it imports none."""
