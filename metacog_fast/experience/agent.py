"""The plan-execute agent: plan -> per sub-task ReAct loop (<= 20 actions, procedural index consulted,
one retry without procedural memory after a failure) -> reflect -> re-plan -> final review -> distil."""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from metacog_fast.experience import entries as en
from metacog_fast.experience import prompts as pr
from metacog_fast.experience import reflect as rf
from metacog_fast.experience.config import ExperienceConfig
from metacog_fast.experience.grounding import LoopBreaker, subtask_commands
from metacog_fast.experience.memory import ExperienceMemory, now_iso
from metacog_fast.experience.tools import ACCESS_GUIDE, ENV_TOOLS, FINISH, action_type
from metacog_fast.experience.trajectory import Step, SubTask, SubTaskQueue, SubTaskResult

if TYPE_CHECKING:
    from metacog_fast.llm.grounding import TextEncoder
    from metacog_fast.llm.grounding import ActionMapper
    from metacog_fast.envs.base import Env
    from metacog_fast.llm.protocol import LLM

AUTO_CONSULT_SIM = 0.5
"""Cosine (skill vs sub-task) above which the best SOP is fetched automatically at sub-task start."""


@dataclass
class TaskRecord:
    """One task (episode) of a protocol run; one JSON line in episodes.jsonl."""

    game: str
    task: str
    task_type: str
    won: bool
    score: float
    env_actions: int
    """Actions of the agent (the ones ``episode_action_cap`` bounds)."""
    subtasks: list[dict[str, Any]]
    subtasks_total: int
    subtasks_flagged: int
    retries: int
    replans: int
    replans_changed: int
    tokens: int
    llm_calls: int
    seconds: float
    memory_sizes: dict[str, int] = field(default_factory=dict)
    grounding: dict[str, int] = field(default_factory=dict)
    """How the actor's turns became commands: counts per way ("choice", "exact", "embed", "choose")."""
    loop_hidden_turns: int = 0
    """Turns at which the loop breaker hid at least one command."""
    verify_actions: int = 0
    """State-reading commands (``look``, ``inventory``) the sub-task verifier sent; they do not
    count against ``episode_action_cap``."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class PlanExecuteAgent:
    """Runs one task at a time in an env adapter (``metacog_fast.envs`` protocol).

    ``memory=None`` or ``config.use_memory=False`` is the no-memory baseline; ``config.learn=False``
    reads memory without writing (transfer / cross-model)."""

    def __init__(self, llm: LLM, env_name: str, memory: ExperienceMemory | None = None,
                 config: ExperienceConfig | None = None, run_id: str = "", model: str = "",
                 count_tokens: pr.TokenCounter | None = None, encoder: TextEncoder | None = None,
                 embed: Any = None) -> None:
        """``encoder``: a MiniLM encoder (``.encode(texts) -> [N, 384]``) for "embed" grounding;
        None loads the package's one on first use. ``embed``: the text embedder of the command
        shortlist (``embed.Embedder``); None takes the memory's, else the hashing embedder (pass
        the same one to memory and baseline runs so that both see the same shortlists)."""
        if env_name not in ENV_TOOLS:
            raise ValueError(f"env_name must be one of {sorted(ENV_TOOLS)}, got {env_name!r}")
        self.llm = llm
        self.env_name = env_name
        self.config = config or ExperienceConfig()
        self.memory = memory if self.config.use_memory else None
        if self.memory is not None:
            self.memory.ensure_tools(env_name)
        self.run_id = run_id
        self.model = model
        self.count = count_tokens or pr.llm_token_counter(llm)
        self._encoder = encoder
        if embed is None:
            from metacog_fast.experience.embed import hashing_embedder

            embed = memory.embed if memory is not None else hashing_embedder
        self.embed = embed
        self._mapper: ActionMapper | None = None

    def mapper(self) -> ActionMapper:
        """The shared ActionMapper (metacog_fast.llm.grounding) in this config's mode (built on first use)."""
        if self._mapper is None:
            from metacog_fast.llm.grounding import ActionMapper

            mode = self.config.action_grounding
            if mode == "embed" and self._encoder is None:
                from metacog_fast.scoring.encoder import MiniLMEncoder

                self._encoder = MiniLMEncoder()
            self._mapper = ActionMapper(mode, encoder=self._encoder, llm=self.llm)
        return self._mapper

    # ------------------------------------------------------------- one task
    def run_task(self, env: Env, **reset_options: Any) -> TaskRecord:
        t0 = time.perf_counter()
        u0 = (self.llm.usage.prompt_tokens + self.llm.usage.completion_tokens, self.llm.usage.calls)
        obs, info = env.reset(**reset_options)
        self.env = env
        self.task = str(info.get("task", ""))
        self.task_type = str(info.get("task_type", info.get("task_name", "")))
        self.admissible = list(info.get("admissible") or [])
        self.last_obs = str(obs)
        self.done = False
        self.won = False
        self.score = 0.0
        self.env_actions = 0
        self.verify_actions = 0
        self.loops = LoopBreaker(self.env_name)
        self.grounded: dict[str, int] = {}
        prov = en.Provenance(task=self.task, run=self.run_id, date=now_iso(), model=self.model)

        queue = SubTaskQueue(self.plan(), self.config.max_subtasks)
        results: list[SubTaskResult] = []
        retries = changed = replans = 0
        reviewed = False
        while not self.done and self.env_actions < self.config.episode_action_cap:
            if not queue:
                # Final review: the plan is used up; if the task is not won, one last sub-task is the task itself.
                if reviewed:
                    break
                reviewed = True
                queue.items.append(SubTask(self.task, self.task))
            st = queue.pop()
            use_proc = self.memory is not None
            res = self.run_subtask(st, use_procedural=use_proc)
            self.judge(res, last=not queue)
            # every condition gets the same second attempt (hiding procedural memory where there is one)
            if (not res.flag and self.config.retry_without_procedural and not self.done
                    and self.env_actions < self.config.episode_action_cap):
                self._count_sop(res)
                results.append(res)  # the failed first attempt stays in the record
                retries += 1
                res = self.run_subtask(st, use_procedural=False, retry=True)
                self.judge(res, last=not queue)
            self._count_sop(res)
            if res.flag and self.memory is not None and self.config.learn:
                sop = rf.distill_sop(self.env_name, self.task_type, res, prov)
                if sop is not None:
                    self.memory.add_sop(sop)
            results.append(res)
            if self.done or self.env_actions >= self.config.episode_action_cap:
                break
            replans += 1
            new = self.replan(queue, results)
            if new is not None and queue.replace(new):
                changed += 1
        if self.memory is not None and self.config.learn:
            self.distill_task(results, prov)
        usage = self.llm.usage
        return TaskRecord(
            game=str(info.get("gamefile", reset_options.get("game", ""))), task=self.task,
            task_type=self.task_type, won=self.won, score=self.score, env_actions=self.env_actions,
            subtasks=[_result_summary(r) for r in results], subtasks_total=len(results),
            subtasks_flagged=sum(r.flag for r in results), retries=retries, replans=replans,
            replans_changed=changed,
            tokens=usage.prompt_tokens + usage.completion_tokens - u0[0], llm_calls=usage.calls - u0[1],
            seconds=time.perf_counter() - t0,
            memory_sizes=self.memory.sizes() if self.memory is not None else {},
            grounding=dict(self.grounded), loop_hidden_turns=self.loops.hidden_turns,
            verify_actions=self.verify_actions)

    # ------------------------------------------------------------- planning
    def plan(self) -> list[SubTask]:
        strategic = [s.text() for s in self.memory.strategic] if (self.memory and self.config.show_strategic) else []
        skills = [p.skill for p in self.memory.active_sops(self.env_name)] if self.memory else []
        prompt = pr.plan_prompt(self.task, self.last_obs, self.config.max_subtasks, strategic, skills)
        text = self.llm.complete(prompt, max_tokens=self.config.plan_max_tokens, stop=["\n\n"])[0].text
        items = [s for s in pr.parse_plan(text, self.config.max_subtasks) if not _copied(s, prompt, self.task)]
        # An unusable plan falls back to the task as its own single sub-task.
        return items or [SubTask(self.task, self.task)]

    def replan(self, queue: SubTaskQueue, results: list[SubTaskResult]) -> list[SubTask] | None:
        done = [(r.subtask.description, r.flag) for r in results]
        prompt = pr.replan_prompt(self.task, done, queue.items, self.last_obs, self.config.max_subtasks)
        text = self.llm.complete(prompt, max_tokens=self.config.plan_max_tokens, stop=["\n\n"])[0].text
        queued = {s.description.lower() for s in queue.items}
        items = [s for s in pr.parse_plan(text, self.config.max_subtasks)
                 if s.description.lower() in queued or not _copied(s, prompt, self.task)]
        return items or None  # unparseable: keep the queue

    # ------------------------------------------------------------- acting
    def run_subtask(self, st: SubTask, use_procedural: bool, retry: bool = False) -> SubTaskResult:
        steps: list[Step] = []
        res = SubTaskResult(st, steps, claimed=False, capped=False, won=False, retry=retry)
        sops = {p.skill: p for p in self.memory.active_sops(self.env_name)} if (use_procedural and self.memory) else {}
        if sops:
            best = self.memory.find_sop(self.env_name, st.description)
            if best is not None:
                e = self.memory.embed([st.description, best.skill])
                if float(e[0] @ e[1]) >= AUTO_CONSULT_SIM:
                    steps.append(Step(f"{ACCESS_GUIDE} {best.skill}", best.text(), "guide"))
                    res.sop_used = best.key
        for n_act in range(self.config.subtask_action_cap):
            if self.done or self.env_actions >= self.config.episode_action_cap:
                break
            commands = self.loops.allowed(self.admissible) if self.config.loop_breaking else list(self.admissible)
            direct = subtask_commands(st.description, commands) if self.config.subtask_as_command else []
            commands = direct or self.shortlist(st, commands)
            if direct:
                self.grounded["subtask_command_turns"] = self.grounded.get("subtask_command_turns", 0) + 1
            guides = [f"{ACCESS_GUIDE} {k}" for k in sops]
            if self.config.loop_breaking:
                # A guide already in this sub-task's trajectory would return the same text again
                # (first CL run: the 135M model spent whole sub-tasks on one access_guide, 20 times).
                fetched = {s.action for s in steps if s.kind == "guide"}
                guides = [g for g in guides if g not in fetched]
            options = list(dict.fromkeys(commands + guides + [FINISH]))
            action = self.act(st, steps, sops, use_procedural, options)
            if action == FINISH:
                res.claimed = True
                steps.append(Step(FINISH, "", "finish"))
                break
            if action.startswith(ACCESS_GUIDE + " ") and action[len(ACCESS_GUIDE) + 1:] in sops:
                sop = sops[action[len(ACCESS_GUIDE) + 1:]]
                steps.append(Step(action, sop.text(), "guide"))
                res.sop_used = sop.key
                continue
            obs = self.env_step(action)
            tip = self.memory.dynamic_instruction(self.env_name, action_type(self.env_name, action)) \
                if self.memory is not None else ""
            steps.append(Step(action, obs, "env", tip))
        else:
            res.capped = True
        res.won = self.won
        return res

    def act(self, st: SubTask, steps: list[Step], sops: dict[str, en.SOP], use_procedural: bool,
            options: list[str]) -> str:
        """One turn of the actor: an element of ``options``, grounded as ``config.action_grounding`` says."""
        mode = self.config.action_grounding
        if mode == "choice":
            prompt = self.action_prompt(st, steps, sops, use_procedural)
            how, action = "choice", self.llm.generate_choice(prompt, options).text
        else:
            # Free text needs the commands in view: the model is not constrained to them.
            prompt = self.action_prompt(st, steps, sops, use_procedural, options)
            # Prompt ends at ">" (not "> "): after a trailing space the 135M model writes only "\n".
            prompt = prompt.rstrip()
            text = self.llm.complete(prompt, max_tokens=self.config.free_action_max_tokens, stop=["\n"])[0].text
            m = self.mapper().map(text, options, prompt)
            how, action = m.how, m.action
        self.grounded[how] = self.grounded.get(how, 0) + 1
        return action

    def shortlist(self, st: SubTask, commands: list[str]) -> list[str]:
        """The ``config.action_shortlist`` commands nearest to the sub-task (description and goal),
        in their original order; all of them when the shortlist is 0 or not shorter."""
        k = self.config.action_shortlist
        if k <= 0 or len(commands) <= k:
            return list(commands)
        e = self.embed([f"{st.description}. {st.goal}"] + list(commands))
        sim = e[1:] @ e[0]
        keep = set(sorted(range(len(commands)), key=lambda i: (-float(sim[i]), i))[:k])
        return [c for i, c in enumerate(commands) if i in keep]

    def env_step(self, action: str, verifier: bool = False) -> str:
        # Not envs.play: one episode spans sub-tasks, verifier probes and turns that never reach the env.
        obs, _reward, done, info = self.env.step(action)
        self.loops.record(action, str(obs))
        if verifier:
            self.verify_actions += 1
        else:
            self.env_actions += 1
        self.admissible = list(info.get("admissible") or self.admissible)
        self.last_obs = str(obs)
        self.won = self.won or bool(info.get("won", info.get("success", False)))
        self.score = max(self.score, float(info.get("score", 1.0 if self.won else 0.0) or 0.0))
        self.done = bool(done)
        return str(obs)

    def action_prompt(self, st: SubTask, steps: list[Step], sops: dict[str, en.SOP], use_procedural: bool,
                      options: list[str] | None = None) -> str:
        """The actor's prompt; ``options`` (free-text grounding) are listed after the sub-task."""
        tools = [t.static for t in (self.memory.tools(self.env_name) if self.memory else [])] or \
            list(ENV_TOOLS[self.env_name].values())
        if not use_procedural or not sops:
            tools = [t for t in tools if not t.startswith(ACCESS_GUIDE)]
        head = [pr.SYSTEM, pr.tools_section(tools)]
        focus = [f"Task: {self.task}", f"Current sub-task: {st.description} (done when: {st.goal})"]
        if options:
            focus.append("Commands you can use now: " + ", ".join(options))
        optional = []
        if self.memory is not None and self.memory.strategic and self.config.show_strategic:
            optional.append(pr.strategic_section([s.text() for s in self.memory.strategic]))
        if sops:
            optional.append(pr.index_section(list(sops)))
        return pr.assemble(head, optional, steps, "> ", self.config.prompt_token_budget, self.count, focus)

    # ------------------------------------------------------------- reflecting
    def judge(self, res: SubTaskResult, last: bool) -> None:
        verify = None if self.done else self._verify
        v = rf.check_subtask(res, last=last, verify=verify, env_name=self.env_name)
        res.flag, res.report = v.flag, v.report

    def _verify(self, cmd: str) -> str:
        if self.done:
            return ""
        return self.env_step(cmd, verifier=True)

    def _count_sop(self, res: SubTaskResult) -> None:
        if res.sop_used and self.memory is not None and self.config.learn and res.sop_used in self.memory.procedural:
            self.memory.record_sop_outcome(self.memory.procedural[res.sop_used], res.flag)

    def distill_task(self, results: list[SubTaskResult], prov: en.Provenance) -> None:
        mem = self.memory
        assert mem is not None
        for s in (mem.strategic if self.config.show_strategic else []):  # a use = shown during the task
            s.counts.record(self.won)
        for d in rf.dilemmas(results, self.won):
            rule = rf.clean_rule(self.llm.complete(pr.strategy_prompt(self.task, d),
                                                   max_tokens=self.config.distill_max_tokens, stop=["\n"])[0].text)
            if rule:
                mem.add_strategic(en.StrategicEntry(d, rule, provenance=prov))
        used = {action_type(self.env_name, s.action) for r in results for s in r.steps if s.kind == "env"}
        for a in used:
            t = mem.tool.get(f"{self.env_name}/{a}")
            if t is not None:
                t.counts.record(self.won)
        for a, instr in rf.distill_tools(self.env_name, results).items():
            mem.set_dynamic(self.env_name, a, instr, prov)


def _copied(st: SubTask, prompt: str, task: str) -> bool:
    """A plan line that is a verbatim piece of its own prompt (a lesson, a skill name, the format
    line): small models echo their prompt, and such a line is not a plan. The task text itself is
    allowed (it is the fallback sub-task anyway)."""
    d = st.description.strip().lower()
    if d.strip(" .") == task.strip().lower().strip(" ."):
        return False
    return len(d) > 12 and d in prompt.lower()


def _result_summary(r: SubTaskResult) -> dict[str, Any]:
    return {"description": r.subtask.description, "goal": r.subtask.goal, "flag": r.flag, "report": r.report,
            "claimed": r.claimed, "capped": r.capped, "retry": r.retry, "sop_used": r.sop_used,
            "actions": [s.action for s in r.steps if s.kind in ("env", "guide", "verify")]}
