"""A resumed run: the attempts in flight when the previous coordinator died are lost."""
from __future__ import annotations

from typing import Any, Mapping

from .. import runstate as rs
from .writer import LedgerWriter


def record_lost_attempts(writer: LedgerWriter, run_id: str, env: Mapping[str, Any]) -> list[str]:
    """Record `run.resumed`, then each attempt in flight `task.lost` with its grant revoked in
    the same transaction (an attempt is never recorded lost with its grant still valid).
    The scheduler then dispatches them again with fresh ids and grants."""
    st = writer.state
    lost = st.active_executions()
    writer.append(rs.RUN_RESUMED, {"lost_attempts": lost, "at_sequence": st.last_sequence,
                                   "environment": dict(env)}, signed=True)
    for neid in lost:
        ex = st.executions[neid]

        def lose(tx: Any, neid: str = neid, ex: Any = ex) -> tuple[None, list]:
            rec = tx.append(run_id, rs.TASK_LOST, {"node_execution_id": neid, "reason": "coordinator restarted"},
                            node_id=ex["node_id"], node_execution_id=neid, wave_id=ex.get("wave_id"),
                            task_id=ex["node_id"])
            rev = tx.revoke(run_id=run_id, jti=ex.get("jti"), profile_id=ex.get("profile_id"),
                            reason="attempt lost on restart")
            return None, [rec, rev]
        writer.transact(lose)
    return lost
