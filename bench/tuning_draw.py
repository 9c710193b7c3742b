"""Does a comparison's interval hold the tuning draw? Simulated comparisons in which the outcome
of tuning varies, run through the comparison's own look schedule and statistics
(:func:`orchestrator.answer.compare.decide_look`), for the design a ``compare:`` block describes.

The design (fixed before any result below was seen):

- *Estimand.* The expected score of a level after tuning with this budget: the mean, over
  tuning draws (``tune_trials`` trials of the level's sampler) and training seeds, of the
  confirmed score of the configuration the draw picked (Dodge et al. 2019; Bouthillier et al.
  2021). The difference of two levels' estimands is what the interval must hold.
- *Replicated tuning* (``compare.tuning: each_seed``, the default). Each paired seed ``k`` is a
  replicate: every level is tuned anew (its sampler seeded for replicate ``k``, the same seed for
  every level: common random numbers), and the replicate's best configuration is trained once
  on the fresh confirmation seed ``seed + k``. The replicate's difference of two levels is then
  an independent draw whose mean is the estimand's difference: the paired t interval over
  replicates, the Pocock boundary over looks and Holm over pairs
  (:mod:`orchestrator.answer.stats`) apply unchanged, the replicate being the unit.
- *Tuned once* (``compare.tuning: once``, what every comparison did before): one tuning draw per
  level, its best trained on every confirmation seed. Its interval covers the seed-to-seed
  spread of two configurations; it does not cover the tuning draw.

The model of a level: a score curve over log learning rate, ``top - width * (x - best)^2``
(accuracy points), a tuning trial's score that curve plus seed noise (sd ``seed_sd``) at an lr
drawn uniformly in log space over the level's range (a random sampler); the confirmed score of
the draw's best configuration is its curve value plus fresh seed noise. The estimand's difference
is computed by Monte Carlo (200,000 draws a level). Scenarios: equal levels (the same curve:
any "better" is false), a small true difference, and the shipped adam_vs_sgd sizes.

Goals (the issue's): a false "better" at most 5%, and the coverage of the estimand's
difference within 1.5 points of nominal (95%), at the shipped sizes, for each_seed; the figures
for ``once`` show what the design it replaces covered.

    python bench/tuning_draw.py                 # about a minute on 2 cores
    python bench/tuning_draw.py --draws 400
"""
