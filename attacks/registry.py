"""The attack registry: one record per membership attack, which the commands and reports iterate without naming any.

A record answers for its attack the way models.Family answers for a model family: its --attacks name, its row label
and plot style, the settings it reads (each a `Setting`: default, help, range; a command's flags are generated from
them and a report's name carries only the settings its attacks used), what it needs, and how it scores

- `leave_one_out(run, settings)`: a shadow run (attacks.shadow.ShadowRun: losses, keep, mask, and on request the
  run's moments, texts and population), every model the target in turn, giving scores [M, N], pooled with keep.npy as
  the labels like the LiRA variants (`evaluate --attacks`, `audit --attacks`, `shadow_sweep --attacks` on model
  subsets);
- `targets(run, target_loss_KxNxT, target_pop_KxZxT, settings)`: separate target models, every shadow model a
  reference (`score_targets --attacks`), giving scores [K, N];
- `texts(arrays, labels_N, settings)`: a features folder (attacks.feature_folder), one score per text, giving rows
  (`pretrain_attacks`); `features` names the folder's arrays it reads.

Every score is higher = member. attacks/catalogue.py registers the project's attacks; adding one is a module with
its scores and its record plus one line there (docs/extending.md).
"""

import dataclasses
from collections.abc import Callable

import numpy as np

from lira.errors import InputError
from lira.options import check_number, range_words

def text_row(attack, name, scores_N, params=None, tuned=False, plotted=True):
  """One row of a features folder's report (what `texts` returns a list of): name, attack, params, tuned, plotted,
  scores [N] (float64)."""
  return {"name": name, "attack": attack, "params": params or {}, "tuned": tuned, "plotted": plotted,
          "scores": np.asarray(scores_N, dtype=np.float64)}


# The places an attack can score: a shadow run's leave-one-out pairs, or a features folder's texts.
WHERE = ("leave_one_out", "targets", "texts")


@dataclasses.dataclass(frozen=True)
class Setting:
  """A setting an attack reads: its flag's name, default, help, range (None: unbounded) and kind: "float", "int", or
  "ints" (a comma-separated list of integers, each in the range)."""

  name: str
  default: object
  help: str
  low: float | None = None
  high: float | None = None
  low_open: bool = False
  high_open: bool = False
  kind: str = "float"

  @classmethod
  def of_field(cls, name, field):
    """The setting of an options class's field (lira/options.py): its default, help and range, written once there."""
    m = field.metadata
    kind = "int" if m.get("integer") else "float"
    return cls(name, field.default, m["help"], m.get("low"), m.get("high"), m.get("low_open", False),
               m.get("high_open", False), kind)

  def check(self, value):
    """The value, checked against the range (lira.options.check_number): InputError naming the setting otherwise
    (None: not set, passes)."""
    if value is None:
      return None
    bounds = dict(low=self.low, high=self.high, low_open=self.low_open, high_open=self.high_open)
    if self.kind != "ints":
      return float(check_number(self.name, value, **bounds)) if self.kind == "float" else \
          check_number(self.name, value, integer=True, **bounds)
    values = [value] if isinstance(value, str) else list(value)
    if not values:
      raise InputError(f"{self.name} must hold at least one integer")
    return tuple(check_number(self.name, int(v) if isinstance(v, str) and v.strip().lstrip("-").isdigit() else v,
                              integer=True, **bounds) for v in values)

  def rule(self):
    """The range in words: 'in (0, 1]', '>= 1', ..."""
    return range_words(self.low, self.high, self.low_open, self.high_open) or "any value"


@dataclasses.dataclass(frozen=True)
class Attack:
  """One attack: see the module docstring. `label(settings)` names its row; `params(settings)` the settings that
  acted on its scores (what results.json records and report names carry)."""

  name: str
  title: str  # the row label without settings: "Min-K%"
  color: str
  uses: tuple = ()  # names of the Settings it reads
  line: str = "-."
  needs: tuple = ()  # what a shadow run must hold beyond losses and keep: "moments", "texts", "population"
  leave_one_out: Callable | None = None
  check: Callable | None = None  # check(run, settings) before any attack scores: InputError naming the problem
  features: tuple = ()  # the features folder's arrays `texts` reads
  texts: Callable | None = None
  note: str | None = None  # the line under a shadow run's table
  uses_when: Callable | None = None  # uses_when(settings) -> the settings that act, when fewer than `uses`
  label_of: Callable | None = None  # label_of(settings) -> the row's name, when not the title and its settings
  check_texts: Callable | None = None  # check_texts(arrays, labels_N, settings) before any attack scores
  new_settings: tuple = ()  # Settings this attack brings to the registry (registered with it)
  targets: Callable | None = None  # targets(run, target_loss_KxNxT, target_pop_KxZxT, settings) -> scores [K, N]
  baseline: bool = False  # never looks at the model (the blind baseline): reports compare the attacks against it

  def can(self, where):
    return getattr(self, where) is not None

  def acting(self, settings):
    """The names of the settings that act on this attack's scores under `settings`."""
    return tuple(self.uses_when(settings)) if self.uses_when else self.uses

  def params(self, settings):
    return {name: settings[name] for name in self.acting(settings)}

  def label(self, settings):
    """The row's name: its title and the settings that act, "Min-K% (k=0.2)"."""
    if self.label_of is not None:
      return self.label_of(settings)
    shown = [f"{SHORT.get(n, n)}={_shown(settings[n])}" for n in self.acting(settings)]
    return self.title + (f" ({', '.join(shown)})" if shown else "")

  @property
  def style(self):
    return {"color": self.color, "ls": self.line}


# How a setting appears in a row's label.
SHORT = {"rmia_gamma": "gamma", "rmia_a": "a", "wbc_windows": "windows"}


def _shown(value):
  if isinstance(value, (tuple, list)):
    return ",".join(str(v) for v in value)
  return f"{value:g}" if isinstance(value, float) else str(value)


class Registry:
  """The registered attacks in order, and their settings; lookups name only what a command can run."""

  def __init__(self, attacks, settings):
    self.attacks = {}
    self.settings = {s.name: s for s in settings}
    for attack in attacks:
      self.register(attack)

  def register(self, attack):
    if attack.name in self.attacks:
      raise ValueError(f"attack {attack.name!r} is registered twice")
    for setting in attack.new_settings:
      if setting.name in self.settings:
        raise ValueError(f"setting {setting.name!r} of attack {attack.name!r} is registered twice")
      self.settings[setting.name] = setting
    unknown = [n for n in attack.uses if n not in self.settings]
    if unknown:
      raise ValueError(f"attack {attack.name!r} uses unregistered settings {unknown}")
    self.attacks[attack.name] = attack

  def names(self, where):
    """The attacks that can score `where` ("leave_one_out" or "texts"), in registration order."""
    if where not in WHERE:
      raise ValueError(f"where must be one of {WHERE}, got {where!r}")
    return tuple(name for name, attack in self.attacks.items() if attack.can(where))

  def chosen(self, names, where, flag="--attacks"):
    """The records of `names` (duplicates dropped, order kept); an unknown name, or one that cannot score `where`,
    is refused with the names that can."""
    names = list(dict.fromkeys(names or []))
    possible = self.names(where)
    bad = [n for n in names if n not in possible]
    if bad:
      what = "unknown attack" if bad[0] not in self.attacks else f"attack that cannot score {_PLACE[where]}"
      raise InputError(f"{flag}: {bad[0]!r} is an {what}; choose from {', '.join(possible)}")
    return [self.attacks[n] for n in names]

  def settings_for(self, where):
    """The Settings of the attacks that can score `where`, in registration order."""
    names = dict.fromkeys(n for a in self.attacks.values() if a.can(where) for n in a.uses)
    return [self.settings[n] for n in names]

  def checked_settings(self, values, attacks, given=(), where="leave_one_out"):
    """{name: value} of every setting, checked; a setting in `given` (set by the user) that none of `attacks`
    reads is refused, so a flag never goes silently unused."""
    out = {}
    for name, setting in self.settings.items():
      out[name] = setting.check(values.get(name, setting.default))
    for name in given:
      if name in self.settings and not any(name in a.acting(out) for a in attacks):
        readers = [a.name for a in self.attacks.values() if a.can(where) and name in a.acting(out)]
        raise InputError(f"--{name} acts on {', '.join(readers)} only, and none of them is in --attacks "
                         f"(given: {', '.join(a.name for a in attacks) or 'none'})")
    return out

  def defaults(self):
    return {name: s.default for name, s in self.settings.items()}


_PLACE = {"leave_one_out": "a shadow run's leave-one-out pairs", "targets": "separate target models",
          "texts": "a features folder's texts"}
