"""Answer ratings: the table they are kept in (:mod:`copilot.feedback.ratings`) and their export as a
question set (:mod:`copilot.feedback.export`)."""
