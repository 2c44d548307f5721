"""The answer, for as long as a request lives: the checked question, the prompt, grounding, citations
and literal checks, the answer events and the finished :class:`~copilot.answer.assembly.Answer`."""
