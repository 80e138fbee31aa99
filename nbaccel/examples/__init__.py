"""Small, complete training examples on real data: the notebooks' and ``nbaccel demo``'s code."""
