"""Notebook 05's explorer: static vs continuous batching on a workload you shape, drawn from the scheduler
simulation :mod:`helpers.batching.simulate` so that it redraws at once. What the simulation leaves out is said in the
figure's caption.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from helpers.batching.simulate import compare_policies, output_lengths, poisson_arrivals


def occupancy_figure(runs: Mapping[str, dict], batch_size: int, arrivals: Sequence[float], unit: str = "s"):
    """Rows per decode step against time for each policy: computed rows (grey) and rows still producing tokens
    (colour); ticks below the axis mark arrivals (in the legend, so their colour is never named in words)."""
    import matplotlib.pyplot as plt

    end = max(run["makespan"] for run in runs.values())
    fig, axes = plt.subplots(len(runs), 1, figsize=(8, 1.6 + 1.5 * len(runs)), sharex=True, squeeze=False)
    for ax, (policy, run) in zip(axes[:, 0], runs.items()):
        frame = run["timeline"]
        edges = np.r_[frame["start"].to_numpy(), frame["end"].to_numpy()[-1:]]
        ax.stairs(frame["rows"], edges, fill=True, color="0.82", label="rows computed")
        ax.stairs(frame["useful"], edges, fill=True, color="C0", alpha=0.85,
                  label="rows producing a token")
        ax.axhline(batch_size, color="k", lw=0.8, ls="--")
        ax.plot(arrivals, np.full(len(arrivals), -0.06 * batch_size), "|", color="C3", ms=7, clip_on=False,
                label="arrivals")
        ax.set(ylim=(-0.1 * batch_size, batch_size * 1.15), ylabel="rows", xlim=(0, end * 1.01),
               title=f"{policy}: {run['throughput']:.0f} tok/{unit}, done at {run['makespan']:.2f} {unit}, "
                     f"{run['wasted']:.0%} of computed rows wasted, mean latency {np.mean(run['latency']):.2f} {unit}")
        ax.title.set_fontsize(9)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="upper center", ncol=3)
    axes[-1, 0].set_xlabel(f"time ({unit}); dashed: batch limit")
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return fig


CONTROL_WIDTH = "460px"  # a slider with a long description: label, track and readout all fit


def batching_explorer(step_seconds: Mapping[int, float] | None = None, *, requests: int = 24, mean_output: int = 32,
                      max_output: int = 192, sigma: float = 1.0, batch_size: int = 8, rate_per_s: float = 0.0,
                      kv_blocks: int | None = 256, block_size: int = 16, seed: int = 0):
    """Notebook 05's explorer: output-length spread σ, batch size, arrival rate and request count → occupancy of
    static and continuous batching over time, with throughput, wasted rows and latency. ``step_seconds``: measured
    decode-step times by batch size (notebook 05's sweep); without them time is counted in steps."""
    import ipywidgets as widgets
    import matplotlib.pyplot as plt

    unit = "s" if step_seconds is not None else "steps"
    style = {"description_width": "initial"}
    sliders = {
        "sigma": widgets.FloatSlider(value=sigma, min=0.0, max=2.0, step=0.1, description="output-length spread σ",
                                     style=style, continuous_update=False),
        "batch": widgets.IntSlider(value=batch_size, min=1, max=32, description="batch size", style=style,
                                   continuous_update=False),
        "rate": widgets.FloatSlider(value=rate_per_s, min=0.0, max=80.0, step=1.0,
                                    description=f"arrivals per {'second' if unit == 's' else 'step'} (0: all at once)", style=style,
                                    continuous_update=False),
        "n": widgets.IntSlider(value=requests, min=4, max=128, step=4, description="requests", style=style,
                               continuous_update=False),
    }

    def draw(sigma, batch, rate, n):
        lengths = output_lengths(n, mean_output, sigma, max_output=max_output, seed=seed)
        arrivals = poisson_arrivals(n, rate, seed=seed)
        prompts = np.clip(np.round(np.random.default_rng(seed + 2).lognormal(np.log(32), 0.8, n)), 4, 192).astype(int)
        runs = compare_policies(lengths, arrivals, batch_size=batch, step_seconds=step_seconds, prompt_lens=prompts,
                                kv_blocks=kv_blocks, block_size=block_size)
        gain = runs["continuous"]["throughput"] / runs["static"]["throughput"]
        occupancy_figure(runs, batch, arrivals, unit)
        plt.show()
        print(f"outputs {min(lengths)}-{max(lengths)} tokens (mean {np.mean(lengths):.1f}); continuous / static "
              f"throughput: {gain:.2f}x")

    for slider in sliders.values():  # long labels: a fixed width leaves every track draggable
        slider.layout = widgets.Layout(width=CONTROL_WIDTH, min_width=CONTROL_WIDTH)
    output = widgets.interactive_output(draw, sliders)
    wrap = widgets.Layout(flex_flow="row wrap")
    return widgets.VBox([widgets.HBox([sliders["sigma"], sliders["batch"]], layout=wrap),
                         widgets.HBox([sliders["rate"], sliders["n"]], layout=wrap), output])
