"""A run's tokenizer and chat renderer, for showing token ids as text and rendering a conversation
afresh (the drift view). Found from the run's config (`model`), else from a checkpoint that holds a
tokenizer; loaded once, on first use, off the request that asked. Where none loads, the reason is
what the page shows instead of text and drift."""

from __future__ import annotations

import threading
from typing import Any

from aworld_train.viewer.store import Run


class RunTokenizer:
    def __init__(self, run: Run) -> None:
        self.run = run
        self._lock = threading.Lock()
        self._loaded = False
        self._warming = False
        self._tokenizer: Any = None
        self._renderer: Any = None
        self.reason: str | None = None
        self.source: str | None = None
        self._pieces: dict[int, str] = {}

    def _load(self) -> None:
        from aworld_train.rollout.policies.models import load_tokenizer

        model = self.run.config().get("model")
        tried = []
        candidates = [str(model)] if model else []
        checkpoint = self.run.latest_checkpoint()
        if checkpoint is not None:
            candidates.append(str(checkpoint))
        for candidate in candidates:
            try:
                self._tokenizer = load_tokenizer(candidate)
                self.source = candidate
                return
            except Exception as exc:  # a moved model folder, a model only a hub has
                tried.append(f"{candidate}: {type(exc).__name__}: {exc}")
        self.reason = (
            "no tokenizer for this run: " + "; ".join(tried)
            if tried
            else "no tokenizer for this run: its config.yaml names no model and no checkpoint holds one"
        )

    def tokenizer(self):
        with self._lock:
            if not self._loaded:
                self._load()
                self._loaded = True
        return self._tokenizer

    def warm(self) -> None:
        """Start loading in the background, once."""
        with self._lock:
            if self._loaded or self._warming:
                return
            self._warming = True
        threading.Thread(target=self.tokenizer, daemon=True).start()

    def pieces(self, ids: list[int]) -> list[str] | None:
        """Each id's text (special tokens as written); None without a tokenizer."""
        tokenizer = self.tokenizer()
        if tokenizer is None:
            return None
        missing = {i for i in ids if i not in self._pieces}
        for token_id in missing:
            self._pieces[token_id] = tokenizer.decode([token_id], clean_up_tokenization_spaces=False)
        return [self._pieces[i] for i in ids]

    def renderer(self):
        """The chat renderer the run's episodes were rendered with (its rollout settings)."""
        tokenizer = self.tokenizer()
        if tokenizer is None:
            return None
        with self._lock:
            if self._renderer is None:
                from aworld_train.rollout.tokens.templates.renderer import ChatRenderer

                rollout = self.run.config().get("rollout") or {}
                self._renderer = ChatRenderer(
                    tokenizer,
                    tool_block=rollout.get("tool_block", "auto"),
                    template_kwargs=rollout.get("chat_template_kwargs") or {},
                )
        return self._renderer

    def status(self) -> dict[str, Any]:
        return {"ok": self._tokenizer is not None, "reason": self.reason, "source": self.source}
