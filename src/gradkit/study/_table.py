"""The study's results as text: the table `gradkit study` prints, and the list of files it wrote."""

import os

from gradkit.study._config import MODELS
from gradkit.study._norms import ADV_NORMS, LABELS, MIN_NORM_ATTACKS, adv_norm_note

WORST = "worst_case"
CERTIFIED = "certified"
FILES = {
    "config.json": "the configuration, backend and data fingerprint (a rerun must match them)",
    "results.json": "models, result rows, per-attack figures, flags, per-sample results, grad norms",
    "results.csv": "the result rows: model, attack, norm, eps, accuracy, ci_low, ci_high, n_points, scope",
    "samples.csv": "per test sample: label; per model clean correct, smallest eps that broke it, by what",
    "robustness.png": "accuracy vs eps with 95% bands, the worst case drawn boldest",
    "grad_norm.png": "gradient norm per epoch during training, one panel per model (members labelled)",
}


INTERVAL = "95% Wilson score interval"
_CELL = 18  # "0.660 [.615,.702]"


def _row(label, cells, width, cell=_CELL):
    return f"{label:<{width}}" + "".join(f"{c:>{cell}}" for c in cells)


def _short(value):
    """0.615 -> ".615", 1.0 -> "1.00": a bound in four characters."""
    return "1.00" if value >= 0.9995 else f"{value:.3f}"[1:]


def _cell(row, n=False):
    """ "0.660 [.615,.702]" (with `n`: " n=120" after it), or "-" for a missing row."""
    if row is None:
        return "-"
    text = f"{row['accuracy']:.3f}"
    if "ci_low" in row:
        text += f" [{_short(row['ci_low'])},{_short(row['ci_high'])}]"
    return text + (f" n={row['n_points']}" if n and "n_points" in row else "")


def _titles(state):
    """(attack, block title) for each block of the table, in order."""
    n, attacks = state.get("n_test"), state["config"]["attacks"]
    points = f"n={n} test points, {INTERVAL} in brackets"
    blocks = [(WORST, f"worst case accuracy ({points})")]
    if state["config"].get("certify"):
        bound = (
            f"certified accuracy, {state['config']['certify']} bounds: a lower bound beside the worst case"
        )
        blocks.append((CERTIFIED, f"{bound} ({points})"))
    blocks += [
        (a, f"{a} accuracy, cumulative: not broken by {a} at this eps or below ({points})")
        for a in attacks
        if a != "standard"
    ]
    if "standard" in attacks:
        blocks.append(("standard", "standard accuracy on the n points no other attack broke (eps > 0)"))
    return blocks


def _comparisons(state, epsilons, width):
    """The block of paired comparisons (results.json "comparisons"), or no lines without them."""
    found = {(c["a"], c["b"], c["eps"]): c for c in state.get("comparisons", [])}
    pairs = list(dict.fromkeys((a, b) for a, b, _ in found))
    if not pairs:
        return []
    lines = [
        "",
        "paired comparison, worst case: difference a - b and McNemar's exact p (two-sided, on the "
        "points one model keeps and the other loses)",
    ]
    label = max(width, *(len(f"{a} - {b}") + 2 for a, b in pairs))
    lines.append(_row("", (f"eps={e:g}" for e in epsilons), label))
    for a, b in pairs:
        cells = (found.get((a, b, e)) for e in epsilons)
        text = ("-" if c is None else f"{c['difference']:+.3f} p{_p(c['p_value'])}" for c in cells)
        lines.append(_row(f"{a} - {b}", text, label))
    return lines


def _checks(state, epsilons, width):
    """The block of the check "certified <= worst case" per model and eps (results.json
    "certified_checks"), or no lines without it."""
    found = {(c["model"], c["eps"]): c for c in state.get("certified_checks", [])}
    if not found:
        return []
    lines = [
        "",
        "check, per point: certified <= worst case (every certified point unbroken by every attack)",
        _row("", (f"eps={e:g}" for e in epsilons), width, _CELL + 6),
    ]
    for name in MODELS:
        cells = (found.get((name, e)) for e in epsilons)
        lines.append(_row(name, (_check_cell(c) for c in cells), width, _CELL + 6))
    return lines


def _check_cell(check):
    """ "0.412 <= 0.569 ok", or "0.412: 3 BROKEN" where an attack broke certified points."""
    if check is None:
        return "-"
    if check["contradicted"]:
        return f"{check['certified']:.3f}: {len(check['contradicted'])} BROKEN"
    return f"{check['certified']:.3f} <= {check['worst_case']:.3f} ok"


def _p(p):
    return "<0.001" if p < 0.001 else f"={p:.3f}"


def _epochs(name, record, config):
    """E.g. "single 20 epochs" or "adv_boost 3/5 members x 4 epochs (stopped: ...)"."""
    if "members" not in record:
        return f"{name} {record.get('epochs', '?')} epochs"
    text = f"{name} {record['members']}/{record['asked']} members x {record['epochs']} epochs"
    if name == "adv_boost" and config.get("adv_mode", "augment") == "augment":
        text += " (round 1 trains twice: clean, then adversarial)"
    if record.get("stop_reason"):
        text += f" (stopped: {record['stop_reason']})"
    return text


def _attacks(config, n_classes=None):
    """One line on the attack settings (the standard evaluation skips APGD-T below 4 classes, FAB-T
    below 3)."""
    steps, classes = config.get("apgd_steps"), n_classes or 4
    ran = ["apgd-ce"] + ["apgd-t"] * (classes >= 4) + ["fab-t"] * (classes >= 3)
    skipped = ["apgd-t"] * (classes < 4) + ["fab-t"] * (classes < 3)
    gradient = f"{', '.join(ran)} {steps} steps"
    if skipped:
        gradient += f" ({', '.join(skipped)} skipped: {n_classes} classes)"
    if config.get("norm") == "l1":
        gradient += " (AutoAttack's L1 version: apgd-ce 5 restarts, apgd-t 5 targets, eps widened first)"
    parts = []
    for attack in config["attacks"]:
        if attack == "pgd":
            parts.append(f"pgd {config['pgd_steps']} steps, eps_step 2.5 eps/steps, random start")
        elif attack in ("apgd-ce", "apgd-t"):
            parts.append(f"{attack} {config.get('apgd_steps')} steps")
        elif attack in MIN_NORM_ATTACKS:
            parts.append(f"{attack} {config.get('apgd_steps')} steps (minimum-norm, one run per model)")
        elif attack == "square":
            parts.append(f"square {config.get('square_queries')} queries")
        elif attack == "standard":
            parts.append(
                f"standard (gradkit.evaluate: {gradient}, square "
                f"{config.get('square_queries')} queries; boosted: objectives loss_sum and vote_margin)"
            )
        else:
            parts.append(attack)
    return "attacks: " + "; ".join(parts)


def _adversarial(config):
    """The lines on how adv_single and adv_boost were trained."""
    attack = config.get("adv_attack", "fgsm")
    adv = f"{attack} {LABELS[ADV_NORMS[config.get('norm', 'linf')]]} eps {config['adv_eps']:g}"
    adv += f", {config['adv_steps']} steps" if attack == "pgd" else ""
    in_fit = f"{adv}{' (random start)' if attack == 'fgsm' else ''} examples made inside fit"
    if config.get("adv_mode", "augment") == "fit":
        boost = f"{in_fit} (gradkit.adversarial_training, boosting weights as sample weights)"
    else:
        boost = f"{adv} examples made against the ensemble so far, trained on clean + adversarial"
    return [
        f"adv_single trains on {in_fit} (gradkit.adversarial_training)",
        f"adv_boost rounds ({config.get('adv_mode', 'augment')} mode) train on {boost}",
    ]


def header(state):
    """The lines above the table: backend, data, model, epochs, members, eps units, attack settings."""
    config, models = state["config"], state["models"]
    norm = config.get("norm", "linf")
    return [
        f"gradkit study - Keras backend: {state['backend']} - data: {state['dataset']} "
        f"({state['n_train']} train / {state['n_test']} test, model {config['model']})",
        "training: " + "; ".join(_epochs(n, models[n], config) for n in MODELS if n in models),
        *_adversarial(config),
        *[note for note in [adv_norm_note(norm)] if note],
        f"eps: {LABELS[norm]} norm, in input units (inputs scaled to [0, 1])",
        _attacks(config, state.get("n_classes")),
        "clean accuracy: "
        + ", ".join(f"{n} {models[n]['clean_accuracy']:.3f}" for n in MODELS if n in models),
    ]


def _when(warning):
    """Where a warning arose: "training", or the first eps whose evaluation raised it (each model's
    warning is kept once: a property of the model, such as `one_network`, holds at every eps)."""
    if warning["attack"] == CERTIFIED:  # one warning per eps where an attack broke certified points
        return f"certified, eps={warning['eps']:g}"
    return "training" if warning["attack"] == "training" else f"first at eps={warning['eps']:g}"


def format_table(state, out=None):
    """The study's results as text: the header, then one block per attack, the worst case first.

    Args:
        state: the dict `run_study` returns (or results.json loaded).
        out: None (default), or the output folder: then the text ends with the folder and its files.

    Returns:
        str: the header (see `header`), one block per attack (its title names the scope, the number
        of points and the interval), one line per model with accuracies to 3 decimals and their 95%
        Wilson intervals ("-" for a missing row; with `--certify` the certified block after the worst
        case, then the check "certified <= worst case" per model and eps), the paired comparisons,
        the warnings of the evaluations, and with `out` the files written.
    """
    epsilons = state["config"]["epsilons"]
    width = max(len(name) for name in MODELS) + 2
    lines = header(state)
    rows = {(r["model"], r["attack"], r["eps"]): r for r in state["results"]}
    for attack, title in _titles(state):
        standard = attack == "standard"
        cell = _CELL + 6 if standard else _CELL
        lines += ["", title, _row("", (f"eps={e:g}" for e in epsilons), width, cell)]
        for name in MODELS:
            cells = (rows.get((name, attack, e)) for e in epsilons)
            lines.append(_row(name, (_cell(c, standard) for c in cells), width, cell))
        if attack == CERTIFIED:
            lines += _checks(state, epsilons, width)
    lines += _comparisons(state, epsilons, width)
    used = ", ".join(state["config"]["attacks"])
    lines.append(f"\nworst case: per test point, over {used} at that eps or below")
    if state.get("warnings"):
        lines += ["", "warnings:"]
        lines += [f"  {w['model']} ({_when(w)}): [{w['name']}] {w['message']}" for w in state["warnings"]]
    if out is not None:
        lines += ["", format_files(out)]
    return "\n".join(lines)


def format_files(out):
    """The lines naming the folder `out` and each file the study wrote there."""
    lines = [f"wrote to {os.path.abspath(out)}:"]
    lines += [f"  {name:<16}{text}" for name, text in FILES.items()]
    lines.append("  single.keras, adv_single.keras (keras.saving.load_model), adaboost_m1/, adv_boost/")
    lines.append("                  (gradkit.load): the trained models")
    return "\n".join(lines)
