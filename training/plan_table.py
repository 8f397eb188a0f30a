"""The readable group plan of `train_shadows --plan` (training/group_plan.py makes the plan): one row per candidate
group size, then the run's groups and its estimated training time."""

from training import group_plan


def size_text(n):
  for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
    if abs(n) < 1024 or unit == "TiB":
      return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
    n /= 1024


def seconds_text(s):
  if s < 1:
    return f"{s * 1e3:.1f} ms"
  if s < 120:
    return f"{s:.1f} s"
  return f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


def table(plan, *, num_models, G, auto, steps_per_epoch, epochs, step_seconds, title, extraction=None,
          configured=None):
  """The readable plan: one row per candidate (memory, per model, per added model: the growth from the candidate
  above it divided by the models added, which leaves out what the group shares, such as a LoRA group's base; FLOPs,
  fits, step time: measured where it was,
  else scaled by FLOPs from G's), then the run's estimate for the G the run uses (`auto`: the plan's choice by its
  rule; else the config's, at most M: `configured` is what the config says), from the step time measured at that G,
  and the estimate of every other G whose step was measured.
  extraction: (the extraction batch at that G, train.eval_batch_size), said when given."""
  lines = [title,
           f"memory limit per device: {size_text(plan.limit_bytes)} ({plan.limit_from}); margin {plan.margin:.0%}: a "
           f"group must fit in {size_text(plan.budget_bytes)}",
           "",
           f"{'G':>5}  {'memory':>10}  {'per model':>10}  {'added/model':>11}  {'step FLOPs':>11}  {'fits':>4}  "
           f"{'step time':>24}",
           f"{'-' * 5}  {'-' * 10}  {'-' * 10}  {'-' * 11}  {'-' * 11}  {'-' * 4}  {'-' * 24}"]
  previous = None  # the last candidate above with a memory
  ref = plan.candidate(G)
  for c in plan.candidates:
    if c.G == G or c.step_seconds:
      when = f"{seconds_text(step_seconds if c.G == G else c.step_seconds)} (measured)"
    elif ref is not None and ref.flops:
      when = f"{seconds_text(step_seconds * c.flops / ref.flops)} (from FLOPs)"
    else:
      when = ""
    mark = (" <- the run's" if c.G == G else "") + (f" ({plan.rule}'s choice)" if c.G == plan.chosen and not auto
                                                    else "")
    if c.error:
      lines.append(f"{c.G:>5}  {'-':>10}  {'-':>10}  {'-':>11}  {'-':>11}  {'no':>4}  {c.error}{mark}")
      continue
    added = "-" if previous is None else size_text((c.bytes - previous.bytes) / (c.G - previous.G))
    previous = c
    lines.append(f"{c.G:>5}  {size_text(c.bytes):>10}  {size_text(c.bytes / c.G):>10}  {added:>11}  "
                 f"{c.flops:>11.3g}  {'yes' if c.fits else 'no':>4}  {when:>24}{mark}")
  if not any(c.fits for c in plan.candidates):
    lines.append("even G = 1 does not fit: expect the run to run out of memory (--shard_params splits each model "
                 "over the local devices)")
  steps = steps_per_epoch * epochs
  total = group_plan.estimate_run_seconds(plan, num_models, G, steps, step_seconds)
  sizes = group_plan.group_sizes(num_models, G)
  configured_words = ("the config" if configured in (None, G) else
                      f"the config's {configured}, at most the {num_models} models")
  lines += ["",
            f"group size {G} ({plan.rule if auto else f'{configured_words}; {plan.rule} would choose {plan.chosen}'}): "
            f"{len(sizes)} group(s) of "
            f"{', '.join(map(str, sorted(set(sizes), reverse=True)))} models; {steps_per_epoch} steps per epoch, "
            f"{epochs} epochs, {steps} steps per group",
            f"estimated training time: {seconds_text(total)} ({len(sizes)} x {steps} steps at the step time measured "
            f"as the median of {group_plan.MEASURED_STEPS} steps of G = {G} on random training rows; compiles and "
            "per-token extraction not included)"]
  for c in plan.candidates:  # the other measured G beside the run's: the largest that fits is not always the fastest
    if c.G != G and c.step_seconds and c.fits:
      other = group_plan.estimate_run_seconds(plan, num_models, c.G, steps, c.step_seconds)
      lines.append(f"  with G = {c.G} instead: {seconds_text(other)} (its step measured: "
                   f"{len(group_plan.group_sizes(num_models, c.G))} x {steps} steps)"
                   + ("; shadow.group_size=fastest chooses by these times" if auto and plan.rule == "auto" else ""))
  if extraction is not None:
    batch, configured = extraction
    lines.append(f"per-token extraction: {batch} sequences per batch" + (
        "" if batch >= configured else f" (train.eval_batch_size = {configured}: the logits of a group of {G} over "
                                       "the vocabulary would not fit)"))
  return "\n".join(lines)
