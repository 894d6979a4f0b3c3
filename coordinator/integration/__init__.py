"""Integration: proposal verification, overlap index, stack planning, the
canvas loop, validation, the gate, promotion and offline verification.

Entry point for the run loop: `finish_run(ctx) -> FinishResult`
(coordinator.integration.finish).
"""
