"""The console's style sheet and script, served from the process itself (no CDN: the console
works offline). The script only improves pages that work without it: it filters table rows as
you type, refreshes a group's pages when asked, and shows times in the browser's zone."""

from __future__ import annotations

__all__ = ["CONSOLE_CSS", "CONSOLE_JS"]

CONSOLE_CSS = """
:root { --fg: #1d2330; --muted: #5d6675; --line: #dde2ea; --accent: #2456c7; --bad: #b42318; --bg: #f6f7f9; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg); }
header { display: flex; gap: 1.5rem; align-items: center; padding: .6rem 1.2rem; background: #18202f; color: #fff; }
header .brand { font-weight: 600; letter-spacing: .02em; }
header nav a { color: #c9d4ea; text-decoration: none; margin-right: 1rem; }
header nav a.active, header nav a:hover { color: #fff; border-bottom: 2px solid #7aa2ff; }
.badge { margin-left: auto; background: #ffb020; color: #18202f; padding: .1rem .5rem; border-radius: 3px; font-size: 12px; }
header form.logout { margin-left: auto; display: flex; gap: .6rem; align-items: center; font-size: 13px; }
.badge + form.logout { margin-left: 0; }
header form.logout button { padding: .1rem .5rem; font-size: 12px; }
form.login { display: grid; gap: .7rem; max-width: 22rem; }
form.login label { display: grid; gap: .2rem; }
main { padding: 1rem 1.2rem 3rem; max-width: 1400px; }
h1 { font-size: 1.35rem; margin: .2rem 0 1rem; word-break: break-all; }
h2 { font-size: 1.05rem; margin: 1.6rem 0 .5rem; }
table { border-collapse: collapse; width: 100%; background: #fff; border: 1px solid var(--line); }
th, td { text-align: left; padding: .35rem .6rem; border-bottom: 1px solid var(--line); vertical-align: top; }
th { background: #eef1f6; font-weight: 600; font-size: 13px; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.empty { color: var(--muted); font-style: italic; }
tr.set td { background: #fffbea; }
pre { margin: 0; white-space: pre-wrap; word-break: break-all; font: 12px/1.4 ui-monospace, Menlo, Consolas, monospace; max-height: 20rem; overflow: auto; }
dl.summary { display: grid; grid-template-columns: max-content 1fr; gap: .2rem 1rem; background: #fff; border: 1px solid var(--line); padding: .6rem 1rem; max-width: 40rem; }
dl.summary dt { color: var(--muted); }
dl.summary dd { margin: 0; }
.note { color: var(--muted); }
.notice { background: #e8f5e9; border: 1px solid #a5d6a7; padding: .4rem .8rem; }
.error, .warning { background: #fdecea; border: 1px solid #f5b7b1; color: var(--bad); padding: .4rem .8rem; }
.tag { font-size: 11px; background: #eef1f6; border-radius: 3px; padding: 0 .3rem; color: var(--muted); }
a { color: var(--accent); }
a.button, button { display: inline-block; background: var(--accent); color: #fff; border: 0; border-radius: 4px; padding: .35rem .8rem; text-decoration: none; font: inherit; cursor: pointer; }
a.button.danger, button.danger { background: var(--bad); }
form.inline { display: inline-flex; gap: .4rem; margin: 0 0 .6rem; }
form.inline button { padding: .15rem .5rem; font-size: 12px; }
form.stacked { display: grid; gap: .7rem; max-width: 32rem; }
form.stacked label { display: grid; gap: .2rem; }
form.browse, form.filter { display: flex; flex-wrap: wrap; gap: .8rem; align-items: end; margin-bottom: .8rem; }
form.browse label { display: grid; gap: .15rem; font-size: 12px; color: var(--muted); }
form.browse input[type=number] { width: 6rem; }
form.browse input[name=timestamp] { width: 15rem; }
input, select, textarea { font: inherit; padding: .25rem .4rem; border: 1px solid #c3cad6; border-radius: 3px; }
svg.chart { background: #fff; border: 1px solid var(--line); width: 100%; max-width: 720px; height: auto; }
svg.chart .axis { stroke: #9aa3b2; stroke-width: 1; }
svg.chart .line { fill: none; stroke: var(--accent); stroke-width: 2; }
svg.chart circle { fill: var(--accent); }
svg.chart .label { font-size: 10px; fill: var(--muted); }
.refresh { float: right; color: var(--muted); }
svg.timeline { max-width: 1200px; }
svg.timeline .track { fill: #f1f3f6; }
svg.timeline .outline { fill: none; stroke-width: 1; }
svg.timeline g.superseded .outline { stroke-dasharray: 4 2; }
svg.timeline g.under-way .outline { stroke-dasharray: 2 2; }
svg.timeline .gen { font-size: 11px; font-weight: 600; fill: var(--fg); }
svg.timeline .summary { font-size: 11px; fill: var(--fg); }
svg.swatch { width: 12px; height: 12px; vertical-align: -1px; }
.legend .trigger { margin-right: .6rem; white-space: nowrap; }
ul.moves { margin: 0; padding-left: 1rem; font: 12px/1.4 ui-monospace, Menlo, Consolas, monospace; }
td.members, td.causes { font-size: 12px; word-break: break-all; }
td.members .joined { color: #2f9e44; font-weight: 600; }
td.members .left { color: var(--bad); text-decoration: line-through; }
"""

CONSOLE_JS = """
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  // Filter the rows of a list as the name filter is typed (the server filters on submit too).
  for (const input of document.querySelectorAll("form.filter input[name=q]")) {
    const table = document.querySelector("table#topics, table#groups");
    if (!table) continue;
    input.addEventListener("input", () => {
      const needle = input.value.toLowerCase();
      for (const row of table.tBodies[0].rows) {
        const name = (row.dataset.name || row.dataset.group || "").toLowerCase();
        row.hidden = needle !== "" && !name.includes(needle);
      }
    });
  }
  // A group's page refreshes itself every 5 s while the box is ticked (remembered per tab).
  const refresh = document.getElementById("auto-refresh");
  if (refresh) {
    refresh.checked = sessionStorage.getItem("strom-console-refresh") === "1";
    let timer = null;
    const arm = () => {
      clearTimeout(timer);
      if (refresh.checked) timer = setTimeout(() => location.reload(), 5000);
    };
    refresh.addEventListener("change", () => {
      sessionStorage.setItem("strom-console-refresh", refresh.checked ? "1" : "0");
      arm();
    });
    arm();
  }
});
"""
