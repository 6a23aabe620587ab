#!/usr/bin/env python3
"""Minimal FastAPI + uvicorn twin of Arbiter's lexical `POST /v1/score`, for bench/score_bench.py.

This is the stack most Python reward services use today: pydantic models for the request,
an async FastAPI route, uvicorn with one worker and default settings (log level warning).
The lexical reward is Python's own `difflib.SequenceMatcher(None, solution_str, gt).ratio()`,
with a list ground truth scored as the maximum over the list. The response has the same shape
as Arbiter's:

    {"scores": [0.11, ...],
     "results": [{"score": 0.11, "status": "ok", "source": "cpu", "cached": false,
                  "attempts": 1, "error": null, "queue_ms": 0.02, "run_ms": 0.01}, ...]}

Run:  python3 bench/fastapi_server.py --port 8001
"""

from __future__ import annotations

import argparse
import difflib
import time
from typing import List, Optional, Union

import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel


class ScoreItem(BaseModel):
    reward: str = "lexical"
    solution_str: str
    ground_truth: Union[str, List[str]]


class ScoreRequest(BaseModel):
    items: List[ScoreItem]


class ItemResult(BaseModel):
    score: Optional[float]
    status: str
    source: str
    cached: bool
    attempts: int
    error: Optional[str]
    queue_ms: float
    run_ms: float


class ScoreResponse(BaseModel):
    scores: List[Optional[float]]
    results: List[ItemResult]


def lexical(solution: str, ground_truth: Union[str, List[str]]) -> float:
    if isinstance(ground_truth, str):
        return difflib.SequenceMatcher(None, solution, ground_truth).ratio()
    if not ground_truth:
        return 0.0
    return max(difflib.SequenceMatcher(None, solution, gt).ratio() for gt in ground_truth)


app = FastAPI(title="lexical score (FastAPI baseline)")


@app.get("/healthz")
async def healthz() -> dict:
    return {"status": "ok"}


@app.post("/v1/score", response_model=ScoreResponse)
async def score(req: ScoreRequest) -> ScoreResponse:
    received = time.perf_counter()
    scores: List[Optional[float]] = []
    results: List[ItemResult] = []
    for item in req.items:
        start = time.perf_counter()
        if item.reward != "lexical":
            scores.append(None)
            results.append(ItemResult(score=None, status="error", source="cpu", cached=False,
                                      attempts=1, error=f"unknown reward '{item.reward}'",
                                      queue_ms=(start - received) * 1e3, run_ms=0.0))
            continue
        value = lexical(item.solution_str, item.ground_truth)
        done = time.perf_counter()
        scores.append(value)
        results.append(ItemResult(score=value, status="ok", source="cpu", cached=False,
                                  attempts=1, error=None, queue_ms=(start - received) * 1e3,
                                  run_ms=(done - start) * 1e3))
    return ScoreResponse(scores=scores, results=results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args()
    uvicorn.run(app, host=args.host, port=args.port, workers=1, log_level=args.log_level)


if __name__ == "__main__":
    main()
