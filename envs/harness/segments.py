"""One episode's requests as a tree of exact segments.

An agent harness sends its model a request per turn, each holding the whole
conversation as the harness keeps it. Each request becomes a :class:`Turn`: the prompt
tokens the policy samples from and the tokens it sampled. Turns form *segments*:

* **extend**: the request is an earlier turn's conversation plus that turn's reply plus
  new messages (tool results, a user turn), and the chat template renders the reply
  the way the model wrote it. The prompt is then the earlier turn's prompt, the tokens
  it sampled (never decoded and re-encoded), and the new messages' tokens: the same
  segment, the new messages' tokens an observation (masked from the loss).
* anything else starts a new segment linked to its **parent**, the earlier turn whose
  context (prompt plus completion) shares the longest prefix with the new prompt
  (``shared`` tokens; the earliest such turn on a tie; none when nothing is shared):

  - **rewrite**: the request continues an earlier turn, but the template renders the
    history differently from what the model saw (Qwen3 drops the ``<think>`` blocks of
    earlier turns once a new user query arrives);
  - **branch**: another context altogether: a sub-agent with its own system prompt, a
    compaction that replaced the history by a summary, a retry of a request, an edited
    history, a continuation of a turn another request already continued;
  - **first**: the session's first request.

Every sampled token belongs to exactly one turn, with the exact context it was sampled
from, so nothing is lost when a harness compacts or delegates: that is the guarantee
``agentenvs check`` verifies from the logs :meth:`SegmentTree.annotate` writes.

Rendering follows :class:`~agentenvs.envs.renderers.ChatRenderer`: the template's text
is tokenized with environment-written contents apart from its markup
(:mod:`agentenvs.envs.tokenizing`), so a tool result that prints ``<|im_end|>`` cannot
forge a control token; only the new messages' text is tokenized when a turn extends.
"""

from __future__ import annotations

import hashlib
import json
import time
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from agentenvs.envs.harness.conversation import (
    ChatRequest,
    Reply,
    RequestError,
    message_key,
    reply_key,
)
from agentenvs.envs.harness.replies import CallIds, ReplyReader, make_reply
from agentenvs.envs.rendered_env import (
    OBSERVATION_CONTROLS_LOG,
    PROMPT_CONTROLS_LOG,
    control_offsets,
)
from agentenvs.envs.renderers import ChatRenderer, Message, Renderer
from agentenvs.envs.types import Logs, Metrics, TokensWithLogprobs, Transition

Start = Literal["first", "extend", "rewrite", "branch"]

# The logs and metrics each turn's transition carries (read by ``agentenvs check``).
SEGMENT_LOG = "gateway/segment"
PARENT_LOG = "gateway/parent"
"""Index of the parent turn in the stored trajectory, -1 for none."""
SHARED_LOG = "gateway/shared"
"""Tokens the prompt shares with the parent's context (prompt + completion)."""
START_LOG = "gateway/start"
API_LOG = "gateway/api"
SAMPLED_BEFORE_LOG = "gateway/sampled_before"
"""Tokens sampled in the stored turns before this one: a dropped turn shows in the sums."""
SAMPLED_SHA_LOG = "gateway/sampled_sha256"
"""Digest of the sampled ids as the gateway handed them out."""
ACTION_TEXT_LOG = "action_text"
SAMPLED_TOKENS_METRIC = "gateway/sampled_tokens"
"""On the last turn: every token sampled in the episode (delivered must equal it)."""
PREFIX_BREAK_METRIC = "renderer/prefix_breaks"
"""The collector's marker of a turn whose next observation does not extend it."""


HEADS_KEPT = 32
"""Rendered first turns (system prompt and tools) kept per tokenizer, their tokens reused."""
_HEADS: weakref.WeakKeyDictionary[object, OrderedDict[str, list[int]]] = weakref.WeakKeyDictionary()


def _heads(tokenizer: object) -> OrderedDict[str, list[int]] | None:
    try:
        return _HEADS.setdefault(tokenizer, OrderedDict())
    except TypeError:  # not weak-referenceable: no reuse
        return None


class SessionRenderer(ChatRenderer):
    """The chat renderer without its memo of the last rendering: a session renders a new
    conversation on every request, and copying each one into the memo (its tools deep
    copied) cost the gateway a fifth of a request's time for nothing."""

    def render_text(
        self, messages: list[Message], tools: list[dict] | None, *, add_generation_prompt: bool
    ) -> str:
        return self._render(messages, tools, add_generation_prompt=add_generation_prompt)


def session_renderer(tokenizer: object) -> SessionRenderer:
    return SessionRenderer(tokenizer)  # type: ignore[arg-type]


def tokens_digest(tokens: Sequence[int]) -> str:
    return hashlib.sha256(json.dumps(list(tokens)).encode()).hexdigest()[:16]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix: a binary search over C-level slice
    comparisons, not a Python loop over tokens."""
    low, high = 0, min(len(a), len(b))
    if a[:high] == b[:high]:
        return high
    while low < high:  # a[:low] == b[:low] and a[:high] != b[:high]
        middle = (low + high + 1) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle - 1
    return low


@dataclass(eq=False)
class Turn:
    """One request of the episode: its prompt, then what was sampled."""

    serial: int
    request: ChatRequest
    history: list[Message]
    """The messages the template rendered (a continued reply as the model wrote it)."""
    client_keys: list[str]
    tools_key: str
    prompt_text: str
    tokens: list[int]
    stop: list[str]
    max_tokens: int | None
    segment: int
    start: Start
    parent: Turn | None = None
    shared: int = 0
    completion: list[int] | None = None
    logprobs: list[float] | None = None
    stop_reason: str = "stop"
    raw_content: str = ""
    """The decoded completion without its end-of-turn marker (how it is rendered back)."""
    marker: str = ""
    reply: Reply | None = None
    continued: bool = False
    """A later turn extends this one's segment (a second continuation branches)."""
    logs: Logs = field(default_factory=dict)
    """What reading the reply recorded (tool-call attempts)."""
    answer_id: str = ""
    """The answer's id, known before sampling (a stream's first event names it)."""

    def context(self) -> list[int]:
        return self.tokens + (self.completion or [])


@dataclass(frozen=True)
class TreeOptions:
    """How a session renders and reads: the renderer's tokenizer, the template's tool-call
    format, and limits on what a request may ask."""

    max_context: int | None = None
    """Prompt tokens a request may have; past it the request is refused (the harness
    sees a context-length error and may compact)."""
    max_tokens: int | None = None
    """A ceiling on every turn's sampled tokens (a request may ask for fewer)."""
    model: str = "agentenvs"


class SegmentTree:
    """The turns of one session (episode) and the segments they form."""

    def __init__(
        self, renderer: Renderer, reader: ReplyReader, *, key: str = "", options: TreeOptions | None = None
    ) -> None:  # fmt: skip
        self.renderer = renderer
        self.reader = reader
        self.options = options or TreeOptions()
        self.ids = CallIds(key)
        self.turns: list[Turn] = []
        """Every prepared turn, in arrival order."""
        self.done: list[Turn] = []
        """Completed turns, in completion order."""
        self.segments = 0

    # ---- a request in -------------------------------------------------------------------
    def prepare(self, request: ChatRequest) -> Turn:
        """The turn for ``request``: its prompt tokens and its place in the tree."""
        keys = [message_key(m) for m in request.messages]
        tools_key = json.dumps(request.tools, sort_keys=True)
        base = self._continued(keys, tools_key)
        tools = request.tools or None
        start: Start
        if base is not None:
            assert base.completion is not None
            n = len(base.client_keys)
            history = [*base.history, {"role": "assistant", "content": base.raw_content}]
            history += request.messages[n + 1 :]
            text = self.renderer.render_text(history, tools, add_generation_prompt=True)
            head = base.prompt_text + base.raw_content
            if text.startswith(head):
                cut = len(head)
                if base.marker and text.startswith(base.marker, cut):
                    cut += len(base.marker)
                suffix = self._encode(history, tools, text, cut)
                tokens = base.context() + suffix
                start = "branch" if base.continued else "extend"
            else:
                tokens = self._fresh(history, tools, text)
                start = "rewrite"
        else:
            history = list(request.messages)
            text = self.renderer.render_text(history, tools, add_generation_prompt=True)
            tokens = self._fresh(history, tools, text)
            start = "branch" if self.done else "first"
        limit = self.options.max_context
        if limit is not None and len(tokens) > limit:
            raise RequestError(
                f"prompt is too long: {len(tokens)} tokens > {limit} maximum", status=400
            )
        turn = Turn(
            serial=len(self.turns),
            request=request,
            history=history,
            client_keys=keys,
            tools_key=tools_key,
            prompt_text=text,
            tokens=tokens,
            stop=self.renderer.stop_condition(list(request.stop)),
            max_tokens=self._cap(request.max_tokens),
            segment=-1,
            start=start,
            answer_id=self.ids.next(request.answer_prefix),
        )
        if start == "extend":
            assert base is not None
            base.continued = True
            turn.parent, turn.shared, turn.segment = base, len(base.context()), base.segment
        else:
            turn.parent, turn.shared = self._closest(tokens)
            turn.segment = self.segments
            self.segments += 1
        self.turns.append(turn)
        return turn

    def measure(self, request: ChatRequest) -> int:
        """Prompt tokens ``request`` would have on its own (a token count; no turn)."""
        tools = request.tools or None
        text = self.renderer.render_text(request.messages, tools, add_generation_prompt=True)
        return len(self._fresh(list(request.messages), tools, text))

    def _cap(self, asked: int | None) -> int | None:
        caps = [c for c in (asked, self.options.max_tokens) if c is not None]
        return min(caps) if caps else None

    def _encode(
        self, history: list[Message], tools: list | None, text: str, start: int
    ) -> list[int]:
        # The task's prompt is what came before the first reply; later texts are the
        # world's (tool output, harness feedback): every added token in them is split.
        self.renderer.prompt_messages = next(
            (i for i, m in enumerate(history) if m.get("role") == "assistant"), len(history)
        )
        return self.renderer.encode_conversation(history, tools, rendered=text, start=start).tokens

    def _fresh(self, history: list[Message], tools: list | None, text: str) -> list[int]:
        """The tokens of a whole rendering, the first turn's reused across sessions.

        Every session of a harness opens with the same system prompt and tools (ten
        thousand tokens for some): their tokens are kept per tokenizer, keyed by the
        text up to the template's first end-of-turn marker. Reused only where that text
        holds no other control string, so it is pure markup and prompt text ending on a
        control token: its encoding is a prefix of the whole's, which is what the rest is
        appended to."""
        heads = _heads(self.renderer.tokenizer)
        marker = self.renderer.end_of_turn[0] if self.renderer.end_of_turn else ""
        cut = text.find(marker) if marker and heads is not None else -1
        if cut < 0 or self.renderer.text.has_control(text[:cut]):
            return self._encode(history, tools, text, 0)
        assert heads is not None
        end = cut + len(marker)
        head = text[:end]
        tokens = heads.get(head)
        if tokens is None:
            tokens = heads[head] = self.renderer.encode(head)
            while len(heads) > HEADS_KEPT:
                heads.popitem(last=False)
        else:
            heads.move_to_end(head)
        return [*tokens, *self._encode(history, tools, text, end)]

    def _continued(self, keys: list[str], tools_key: str) -> Turn | None:
        """The latest completed turn this request continues: its messages, then its reply."""
        best: Turn | None = None
        for turn in reversed(self.done):
            n = len(turn.client_keys)
            if turn.tools_key != tools_key or len(keys) <= n or turn.reply is None:
                continue
            if best is not None and n <= len(best.client_keys):
                continue
            if keys[n] == reply_key(turn.reply) and keys[:n] == turn.client_keys:
                best = turn
        return best

    def _closest(self, tokens: list[int]) -> tuple[Turn | None, int]:
        """The earliest completed turn whose context shares the longest prefix with
        ``tokens``, and that length ((None, 0) when nothing is shared)."""
        best, shared = None, 0
        for turn in self.done:
            n = common_prefix(tokens, turn.context())
            if n > shared:
                best, shared = turn, n
        return best, shared

    # ---- tokens out -----------------------------------------------------------------------
    def complete(self, turn: Turn, action: TokensWithLogprobs) -> Reply:
        """Record what was sampled for ``turn`` and read it into the API's reply."""
        turn.completion = list(action.tokens)
        turn.logprobs = None if action.logprobs is None else list(action.logprobs)
        turn.stop_reason = action.stop_reason
        turn.raw_content, turn.marker = self.reader.raw_text(turn.completion)
        read = self.reader.read(turn.completion, action.stop_reason, turn.request)
        turn.reply = make_reply(
            read,
            self.ids,
            answer_id=turn.answer_id,
            call_prefix=turn.request.call_prefix,
            prompt_tokens=len(turn.tokens),
            completion_tokens=len(turn.completion),
            created=int(time.time()),
            model=turn.request.model or self.options.model,
        )
        self.done.append(turn)
        return turn.reply

    def sampled_tokens(self) -> int:
        return sum(len(t.completion or []) for t in self.done)

    # ---- the stored form --------------------------------------------------------------------
    def segment_order(self) -> list[Turn]:
        """Completed turns segment by segment (each in its order), segments in the order
        they began: every segment becomes one training sample, and a parent always
        comes before its children."""
        return sorted(self.done, key=lambda t: (t.segment, t.serial))

    def annotate(
        self, turn: Turn, position: int, stored: Sequence[Turn], sampled_before: int
    ) -> Logs:
        """The logs of ``turn`` stored at ``position`` of ``stored`` (its parent must be
        among the earlier ones)."""
        parent = -1
        if turn.parent is not None:
            parent = next(i for i in range(position) if stored[i] is turn.parent)
        assert turn.completion is not None
        return {
            SEGMENT_LOG: turn.segment,
            PARENT_LOG: parent,
            SHARED_LOG: turn.shared,
            START_LOG: turn.start,
            API_LOG: turn.request.api,
            SAMPLED_BEFORE_LOG: sampled_before,
            SAMPLED_SHA_LOG: tokens_digest(turn.completion),
            ACTION_TEXT_LOG: self.renderer.decode(turn.completion),
            **turn.logs,
        }

    def transitions(
        self, order: Sequence[Turn] | None = None, *, reward: float = 0.0
    ) -> list[Transition]:
        """The completed turns as transitions (``order``: :meth:`segment_order` by
        default), with their segment logs; the last one carries the episode's reward,
        ``done`` and the total of sampled tokens."""
        stored = list(self.segment_order() if order is None else order)
        transitions: list[Transition] = []
        sampled = 0
        for position, turn in enumerate(stored):
            assert turn.completion is not None
            logs = self.annotate(turn, position, stored, sampled)
            sampled += len(turn.completion)
            last = position == len(stored) - 1
            if position == 0:
                logs.update(self.controls_log(turn.tokens, None))
            following = None if last else stored[position + 1]
            metrics = self.step_metrics(turn, following)
            if following is not None:
                logs.update(self.controls_log(following.tokens, turn.context()))
            if last:
                metrics[SAMPLED_TOKENS_METRIC] = sampled
            action = TokensWithLogprobs(list(turn.completion), turn.logprobs, turn.stop_reason)  # type: ignore[arg-type]
            transitions.append(
                Transition(list(turn.tokens), action, reward if last else 0.0, last, metrics, logs)
            )
        return transitions

    def step_metrics(self, turn: Turn, following: Turn | None) -> Metrics:
        """A prefix break when the next stored turn does not extend ``turn``'s context
        (the mark the training-sample split and ``check`` read)."""
        if following is not None and not extends(following.tokens, turn.context()):
            return {PREFIX_BREAK_METRIC: 1}
        return {}

    def controls_log(self, tokens: Sequence[int], context: Sequence[int] | None) -> Logs:
        """Where the template put control tokens in what ``tokens`` adds after
        ``context`` (all of it without one, or when it does not extend it): the record
        ``check`` holds an observation's control tokens to."""
        encoder = self.renderer.text
        if context is None:
            return {PROMPT_CONTROLS_LOG: control_offsets(encoder.control_positions(tokens))}
        new = tokens[len(context) :] if extends(tokens, context) else tokens
        return {OBSERVATION_CONTROLS_LOG: control_offsets(encoder.control_positions(new))}


def extends(tokens: Sequence[int], context: Sequence[int]) -> bool:
    """``tokens`` starts with ``context`` (the next prompt extends a turn's context)."""
    return len(tokens) >= len(context) and tokens[: len(context)] == context
