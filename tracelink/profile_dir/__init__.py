"""The profile directory: its declared files (:mod:`.files`), its ownership and lock (:mod:`.claim`),
and a profile read back and written as one object (:mod:`.profile`, :mod:`.functions`)."""
