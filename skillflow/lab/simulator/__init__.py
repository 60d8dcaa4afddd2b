"""A small airline/orders world whose tools really execute, and a simulated agent that records its runs.

Used by the demo (no corpus needed), by drift demos (``break_tool``) and by the evaluation harness
(``held_out_requests`` + ``execute``).
"""

from skillflow.lab.simulator.agent import (
    DEFAULT_AGENT_ID,
    SimReport,
    SimRun,
    SkillHint,
    SkillsForQuery,
    business_outcome,
    simulate_runs,
)
from skillflow.lab.simulator.conversations import conversation_messages, simulate_conversations
from skillflow.lab.simulator.domain import Tools
from skillflow.lab.simulator.procedures import PROCEDURES, Procedure, good_procedure, procedures_for
from skillflow.lab.simulator.scenarios import INTENTS, Execution, Task, execute, held_out_requests, new_task

__all__ = [
    "DEFAULT_AGENT_ID",
    "INTENTS",
    "PROCEDURES",
    "Execution",
    "Procedure",
    "SimReport",
    "SimRun",
    "SkillHint",
    "SkillsForQuery",
    "Task",
    "Tools",
    "business_outcome",
    "conversation_messages",
    "execute",
    "good_procedure",
    "held_out_requests",
    "new_task",
    "procedures_for",
    "simulate_conversations",
    "simulate_runs",
]
