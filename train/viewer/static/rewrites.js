// aworld-train view: where an agent rewrote its history (a summary, a trimmed or compacted history),
// shown before the segment the rewrite began: what the agent's history kept, what it dropped and
// the text that replaced it (train/viewer/rewrites.py computes it). Loaded before app.js.
"use strict";

function rewriteSpan(span, kind) {
  const text = span.text === null ? `<span class="muted">${span.tokens} tokens (no tokenizer: text not shown)</span>` : esc(span.text);
  const sampled = (span.sampled_in || []).map((s) => `<span class="badge ok rewrite-sampled" title="this text is what the policy sampled there: it trained as the policy's own answer">written by the policy: segment ${s.segment + 1}, its call ${s.turn + 1}</span>`).join(" ");
  return `<div class="rewrite-span ${kind}" data-tokens="${span.tokens}"><small>${kind} ${span.tokens} tokens</small> ${sampled}<pre>${text}</pre></div>`;
}

function rewriteBlock(seg) {
  const rw = seg.rewrite;
  if (!rw) return "";
  return `<details class="rewrite card" data-segment="${seg.index}" open>
    <summary>rewrite before the agent's call ${seg.first_call + 1}: its history kept <b class="rw-kept">${rw.kept}</b> tokens, dropped <b class="rw-dropped">${rw.dropped_tokens}</b> (${rw.dropped.length} span${rw.dropped.length === 1 ? "" : "s"}), gained <b class="rw-added">${rw.added_tokens}</b></summary>
    ${rw.dropped.map((s) => rewriteSpan(s, "dropped")).join("")}${rw.added.map((s) => rewriteSpan(s, "added")).join("")}
  </details>`;
}
