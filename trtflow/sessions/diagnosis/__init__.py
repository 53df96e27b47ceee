"""A diagnosis: one ranked story of why a model loses accuracy in FP16/BF16/FP8 or when quantized.

Each tool users have gives one piece — a first divergence, a first NaN, a reduced region, a keep
set — and the pieces disagree. A diagnosis ties them together by measurement (`session.Diagnosis`):
1. the precision search finds a 1-minimal keep set (`sessions.precision`);
2. the keep set is split into causes, small node sets connected in the graph (`causes`); each is
   established counterfactually on the switchable emulated model with every float tensor tapped
   (`probe`): the outputs with only that set kept, and with every other kept set but not that one;
   causes are ranked by how much of the output damage keeping them alone removes;
3. each cause gets its mechanism in a deployment engineer's words, with the numbers (`mechanisms`),
   its first non-finite tensor, and a standalone repro that fails on its own (`repro`);
4. the other findings — the first divergence, the first non-finite tensor — are attached to the
   cause whose keeping alone removes them, or listed as real but harmless with their measured
   effect on the outputs;
5. the fix in every form, each applied by its real tool and judged again (`sessions.roundtrip`).
"""
