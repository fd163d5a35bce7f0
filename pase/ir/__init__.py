"""The graph IR: layers with named iteration spaces (:mod:`.graph`) and the ways each can be split (:mod:`.configs`)."""
