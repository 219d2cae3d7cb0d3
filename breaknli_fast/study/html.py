"""report.html: one self-contained page (no network) per run directory and per study.

The page holds the comparison table (:mod:`breaknli_fast.study.compare`), the plots as ``data:`` URIs, each
run's report.md, and an example browser over samples.jsonl (a row per record with its premise and hypothesis):
filters by model, dataset, mode (the probe's group),
ŷ = M(p, h), verdict, a category column (the run's ``--by`` columns, e.g. TaxiNLI's categories) and text; each
example opens to the probe's own view of its record (:meth:`~breaknli_fast.probes.base.Probe.example_view`:
BreakNLI's K raw candidates, the kept ones with M's labels and probabilities and why the example broke; the
permutations and their labels; MERGE's variants). The filters live in the address's fragment
(``report.html#mode=entailed&verdict=inequality&open=0``), so a view can be bookmarked or shared.

The page depends on the run directories' files alone (and on the dataset for the category columns), so ``run``
and ``breaknli-fast report --html`` on the same directories write the same bytes.
"""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path
from typing import Any, Sequence

from breaknli_fast.study.compare import Comparison, Run, compare, load_runs, probe_type
from breaknli_fast.study.table_files import cell_text, plot

MAX_EXAMPLES = 2000  # records of one run embedded in the page (0: all)
SHOWN_ROWS = 300  # rows the browser draws before "show more"


def _e(text: Any) -> str:
    return html.escape("" if text is None else str(text), quote=True)


def _png_uri(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def _load_data(run: Run) -> Any:
    """The run's dataset loaded again from config.json (for its category columns)."""
    from breaknli_fast.data.loaders import Columns, load_examples

    ds = run.config.get("dataset") or {}
    return load_examples(ds.get("name"), split=ds.get("split"), limit=ds.get("limit"),
                         cols=Columns(**(ds.get("columns") or {})), seed=int(run.config.get("seed") or 0))


def categories(run: Run, data: Any, notes: list[str]) -> dict[str, list[str]]:
    """Per example id, the category labels it carries among the run's breakdown columns (a 0/1 column by its name
    where it is 1; another column as ``column=value``)."""
    from breaknli_fast.errors import UserError
    from breaknli_fast.study.breakdown import column_groups

    columns = list((run.report.get("breakdown") or {}).keys())
    if not columns:
        return {}
    try:
        data = data if data is not None else _load_data(run)
        out: dict[str, list[str]] = {}
        for col in columns:
            spec = column_groups(data, col)
            for label, value, ids in spec["groups"]:
                if spec["kind"] == "category" and value != "1":
                    continue
                for i in ids:
                    out.setdefault(i, []).append(label)
        return out
    except (UserError, OSError, ValueError) as e:
        notes.append(f"{run.path.name}: the category columns are not shown (the dataset could not be read: {e})")
        return {}


def examples(runs: Sequence[Run], data: dict[str, Any] | None, max_examples: int | None,
             notes: list[str]) -> tuple[list[dict[str, Any]], list[str], list[dict[str, Any]]]:
    """The browser's rows: (examples, category labels, per-run counts)."""
    cat_index: dict[str, int] = {}
    rows: list[dict[str, Any]] = []
    counts = []
    for ri, run in enumerate(runs):
        cls = probe_type(run.probe)
        recs = run.records
        rank: dict[str, int] = {}
        for r in recs:
            rank.setdefault(str(r.get(cls.group_key)), len(rank))
        recs = sorted(recs, key=lambda r: rank[str(r.get(cls.group_key))])
        shown = recs if not max_examples else recs[:max_examples]
        counts.append({"shown": len(shown), "total": len(recs)})
        cats = categories(run, (data or {}).get(str(run.path)), notes)
        for r in shown:
            view = cls.example_view(r, run.report)
            c = [cat_index.setdefault(x, len(cat_index)) for x in cats.get(str(r.get("id")), [])]
            rows.append({"r": ri, "id": str(r.get("id")), "g": view.get("group"), "y": view.get("yhat"),
                         "v": view.get("verdict"), "vl": view.get("verdict_label"), "c": c, "view": view})
    return rows, list(cat_index), counts


def table_html(comp: Comparison) -> str:
    """The comparison table with the publication's row spans (dataset, then block)."""
    head = ["Dataset", comp.header[0], comp.header[1]]
    out = ['<table class="cmp"><thead><tr>' + "".join(f"<th>{_e(h)}</th>" for h in head)]
    for m in comp.models:
        accs = []
        for ds in comp.datasets:
            a = comp.accuracy.get((ds, m))
            if a and a.get("rate") is not None:
                accs.append((f"{ds} " if len(comp.datasets) > 1 else "") + f"{a['rate']:.2f} %")
        out.append(f"<th>{_e(m)}" + "".join(f'<div class="acc">{_e(x)}</div>' for x in accs) + "</th>")
    out.append("</tr></thead><tbody>")
    span_ds = {ds: sum(1 for d, _, _ in comp.rows if d == ds) for ds in comp.datasets}
    span_block: dict[tuple[str, str], int] = {}
    for d, b, _ in comp.rows:
        span_block[(d, b)] = span_block.get((d, b), 0) + 1
    prev: tuple[str, str] | None = None
    for ds, block, label in comp.rows:
        cls = ' class="overall"' if label == "Overall" else ""
        tr = [f"<tr{cls}>"]
        if prev is None or prev[0] != ds:
            tr.append(f'<th rowspan="{span_ds[ds]}" class="ds">{_e(ds)}</th>')
        if prev != (ds, block):
            tr.append(f'<th rowspan="{span_block[(ds, block)]}" class="blk">{_e(block)}</th>')
        tr.append(f'<th class="row">{_e(label)}</th>')
        for m in comp.models:
            rates, cis, n = cell_text(comp.cells.get((ds, block, label, m)))
            if rates == "–":
                tr.append('<td class="empty">–</td>')
            else:
                tr.append(f'<td><div class="rt">{_e(rates)}</div><div class="ci">{_e(cis)} · n={n}</div></td>')
        tr.append("</tr>")
        out.append("".join(tr))
        prev = (ds, block)
    out.append("</tbody></table>")
    return "".join(out)


def render(runs: Sequence[Run], data: dict[str, Any] | None = None, max_examples: int | None = MAX_EXAMPLES,
           title: str | None = None) -> str:
    """The page of ``runs`` (one run, or a study's cells)."""
    comp = compare(runs)
    notes: list[str] = []
    rows, cats, counts = examples(runs, data, max_examples, notes)
    cls = probe_type(comp.probe)
    if title is None:
        title = (f"{comp.probe}: {comp.models[0]} on {comp.datasets[0]}" if len(runs) == 1 else
                 f"{comp.probe}: {len(comp.models)} models × {len(comp.datasets)} datasets")
    buf = io.BytesIO()
    table_png = buf.getvalue() if plot(comp, buf) else None
    run_plots = [(f"{run.model} on {run.dataset}: {png.name}", png.read_bytes())
                 for run in runs for png in sorted(run.path.glob("*.png"))]
    for run, c in zip(runs, counts):
        if c["shown"] < c["total"]:
            notes.append(f"{run.model} on {run.dataset}: the browser holds the first {c['shown']} of {c['total']} "
                         "records (breaknli-fast report DIR --html --max-examples 0 holds them all)")
    payload = {"title": title, "probe": comp.probe, "group": cls.group_key,
               "runs": [{"model": r.model, "dataset": r.dataset, "dir": r.path.name, **c} for r, c in zip(runs, counts)],
               "cats": cats, "examples": rows, "shown": SHOWN_ROWS}
    blob = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), default=str)
    blob = blob.replace("</", "<\\/").replace("<!--", "<\\!--")
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{_e(title)}</title>",
             f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><style>{CSS}</style></head><body>",
             f"<h1>{_e(title)}</h1>", '<ul class="settings">']
    parts += [f"<li>{_e(s)}</li>" for s in comp.settings]
    parts.append("</ul><h2>Table</h2>")
    what = " / ".join(comp.measures)
    parts.append(f'<p class="legend">Cells: {_e(what)} % with their 95 % intervals and n; header: accuracy of M on '
                 f"(p, h){' per dataset' if len(comp.datasets) > 1 else ''}.</p>")
    parts.append(table_html(comp) if comp.rows else
                 f'<p class="note">The {_e(comp.probe)} probe has no comparison table; its report.md is below.</p>')
    if comp.note:
        parts.append(f'<p class="note">{_e(comp.note)}</p>')
    if table_png is not None:
        caption = "the table: rates with 95 % interval bars"
        parts.append(f'<figure><img alt="{_e(caption)}" src="{_png_uri(table_png)}"><figcaption>{_e(caption)}'
                     "</figcaption></figure>")
    parts.append("<h2>Examples</h2>")
    parts += [f'<p class="note">{_e(n)}</p>' for n in notes]
    parts.append('<div id="filters"></div><p id="count"></p><table id="examples"><thead><tr><th>#</th><th>model</th>'
                 f"<th>dataset</th><th>{_e(cls.group_key)}</th><th>ŷ</th><th>gold</th><th>verdict</th>"
                 '<th>premise</th><th>hypothesis</th></tr></thead><tbody id="rows"></tbody></table>'
                 '<button id="more" type="button" hidden>show more</button>')
    parts.append("<h2>Runs</h2>")
    if run_plots:
        parts.append(f"<details><summary>the runs' own plots ({len(run_plots)})</summary>")
        for caption, png in run_plots:
            parts.append(f'<figure><img alt="{_e(caption)}" src="{_png_uri(png)}"><figcaption>{_e(caption)}'
                         "</figcaption></figure>")
        parts.append("</details>")
    for run in runs:
        md = run.path / "report.md"
        text = md.read_text(encoding="utf-8", errors="replace") if md.exists() else "(no report.md)"
        parts.append(f"<details><summary>{_e(run.model)} on {_e(run.dataset)}: <code>{_e(run.path.name)}</code>"
                     f"</summary><pre>{_e(text)}</pre></details>")
    parts.append(f'<script type="application/json" id="data">{blob}</script><script>{JS}</script></body></html>')
    return "".join(parts) + "\n"


def write_html(paths: Sequence[str | Path], out: str | Path, data: dict[str, Any] | None = None,
               max_examples: int | None = MAX_EXAMPLES, title: str | None = None) -> Path:
    """Write the page of the run (or study) directories ``paths`` to ``out``; ``data``: datasets already loaded,
    by run directory (else each is loaded again from config.json for its category columns)."""
    from breaknli_fast.study.rundir import write_text_atomic

    runs = load_runs(paths)
    out = Path(out)
    write_text_atomic(out, render(runs, data, max_examples, title))
    return out


CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#1d1d1f;max-width:1400px}
h1{font-size:22px;margin:0 0 8px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}
.settings{color:#555;margin:4px 0 12px;padding-left:18px}.legend,.note{color:#555;max-width:1100px}
table{border-collapse:collapse}
table.cmp th,table.cmp td{border:1px solid #ccc;padding:4px 8px;vertical-align:middle}
table.cmp thead th{background:#f3f3f6}.acc{font-weight:normal;color:#555;font-size:12px}
table.cmp td{text-align:center;white-space:nowrap}.rt{font-variant-numeric:tabular-nums}
.ci{color:#666;font-size:11px;font-variant-numeric:tabular-nums}tr.overall td,tr.overall th.row{background:#fafae8;font-weight:600}
th.ds,th.blk{background:#f8f8fb;text-align:left}th.row{text-align:left;font-weight:normal}td.empty{color:#aaa}
figure{display:inline-block;margin:8px 16px 8px 0;vertical-align:top}figure img{max-width:100%;border:1px solid #eee}
figcaption{color:#555;font-size:12px}
#filters{display:flex;flex-wrap:wrap;gap:8px 16px;align-items:end;margin:8px 0}
#filters label{display:flex;flex-direction:column;font-size:12px;color:#555}
#filters select,#filters input{font-size:13px;padding:2px 4px;min-width:120px}
#examples{width:100%}#examples th,#examples td{border-bottom:1px solid #e5e5e5;padding:4px 6px;text-align:left;vertical-align:top}
#examples thead th{background:#f3f3f6;position:sticky;top:0}#examples td.txt{min-width:14em}tr.ex{cursor:pointer}tr.ex:hover{background:#f5f8ff}
tr.ex.open{background:#eef3ff}.v-bad{color:#b00020;font-weight:600}.v-warn{color:#a15c00;font-weight:600}
.v-ok{color:#17692c}.v-muted{color:#888}
td.detail{background:#fbfbfd;padding:10px 16px}.pair{margin:2px 0}.pair b{display:inline-block;width:80px;color:#555}
.why{margin:8px 0;padding:6px 10px;border-left:4px solid #888;background:#f4f4f4}
.sec{margin:10px 0}.sec h4{margin:4px 0;font-size:13px;color:#333}
.sec table td,.sec table th{border:1px solid #ddd;padding:2px 6px;font-size:12.5px}
tr.m-bad td{background:#fde7ea}tr.m-warn td{background:#fff3dc}tr.m-ok td{background:#eaf7ee}tr.m-muted td{color:#888}
ol.cands{margin:2px 0;padding-left:28px;columns:2;font-size:12.5px}
"""

JS = r"""
(function(){
const D=JSON.parse(document.getElementById('data').textContent);
const FIELDS=[['model','model'],['dataset','dataset'],['group',D.group],['yhat','ŷ'],['verdict','verdict'],['cat','category']];
const ALIAS={y:'yhat'}; ALIAS[D.group]='group';  // the address names the group as the probe does (mode=...)
const runs=D.runs, ex=D.examples;
function val(e,f){const r=runs[e.r];
  if(f==='model')return r.model; if(f==='dataset')return r.dataset; if(f==='group')return e.g;
  if(f==='yhat')return e.y; if(f==='verdict')return e.v; return null;}
const opts={};
for(const [f] of FIELDS){const seen=new Map();
  if(f==='cat'){D.cats.forEach((c,i)=>seen.set(String(i),c));}
  else for(const e of ex){const v=val(e,f); if(v!==null&&v!==undefined&&!seen.has(String(v)))
    seen.set(String(v), f==='verdict'?e.vl:String(v));}
  opts[f]=seen;}
const box=document.getElementById('filters'); const sel={};
for(const [f,label] of FIELDS){const o=opts[f]; if(o.size<(f==='cat'?1:2)&&f!=='verdict')continue;
  const l=document.createElement('label'); l.textContent=label; const s=document.createElement('select');
  s.id='f-'+f; s.appendChild(new Option('all',''));
  for(const [v,t] of o){s.appendChild(new Option(t,f==='cat'?t:v));}
  s.addEventListener('change',()=>{state[f]=s.value; state.open=null; write(); draw();}); l.appendChild(s); box.appendChild(l); sel[f]=s;}
const ql=document.createElement('label'); ql.textContent='text'; const q=document.createElement('input');
q.id='f-q'; q.type='search'; q.placeholder='premise, hypothesis, candidate';
q.addEventListener('input',()=>{state.q=q.value; write(); draw();}); ql.appendChild(q); box.appendChild(ql);
let state={}; let limit=D.shown;
function read(){state={}; const p=new URLSearchParams(location.hash.slice(1));
  for(const [k,v] of p){state[ALIAS[k]||k]=v;}
  for(const f in sel){sel[f].value=state[f]||''; if(sel[f].value!==(state[f]||''))sel[f].value='';}
  q.value=state.q||'';}
function write(){const p=new URLSearchParams();
  for(const [k,v] of Object.entries(state)){if(v!==null&&v!==undefined&&v!=='')p.set(k==='group'?D.group:k,v);}
  history.replaceState(null,'','#'+p.toString());}
function catName(i){return D.cats[i];}
function match(e){
  for(const [f] of FIELDS){const want=state[f]; if(!want)continue;
    if(f==='cat'){if(!e.c.some(i=>catName(i)===want))return false;}
    else if(String(val(e,f))!==want)return false;}
  if(state.q){const t=state.q.toLowerCase(); const v=e.view;
    const hay=(v.premise+' '+v.hypothesis+' '+JSON.stringify(v.sections)).toLowerCase(); if(!hay.includes(t))return false;}
  return true;}
const MARK={inequality:'v-bad',relaxed:'v-warn',holds:'v-ok',some_wrong:'v-bad',all_correct:'v-ok',many:'v-bad',
  some:'v-warn',none:'v-ok',wrong:'v-bad',correct:'v-ok'};
function td(tr,text,cls){const c=document.createElement('td'); c.textContent=(text===null||text===undefined)?'–':String(text);
  if(cls)c.className=cls; tr.appendChild(c); return c;}
function detail(e){const v=e.view; const d=document.createElement('td'); d.colSpan=9; d.className='detail';
  for(const [k,t] of [['p',v.premise],['h',v.hypothesis]]){const div=document.createElement('div'); div.className='pair';
    const b=document.createElement('b'); b.textContent=k; div.appendChild(b); div.appendChild(document.createTextNode(t)); d.appendChild(div);}
  if(v.why){const w=document.createElement('div'); w.className='why'; w.textContent=v.why; d.appendChild(w);}
  for(const s of v.sections||[]){const sec=document.createElement('div'); sec.className='sec';
    const h=document.createElement('h4'); h.textContent=s.title; sec.appendChild(h);
    if(s.kind==='list'){const ol=document.createElement('ol'); ol.className='cands';
      for(const it of s.items){const li=document.createElement('li'); li.textContent=it; ol.appendChild(li);} sec.appendChild(ol);}
    else if(s.kind==='table'){const t=document.createElement('table'); const hr=document.createElement('tr');
      for(const c of s.columns){const th=document.createElement('th'); th.textContent=c; hr.appendChild(th);} t.appendChild(hr);
      s.rows.forEach((row,i)=>{const tr=document.createElement('tr'); const m=(s.marks||[])[i]; if(m)tr.className='m-'+m;
        for(const c of row)td(tr,c); t.appendChild(tr);}); sec.appendChild(t);}
    else{const p=document.createElement('p'); p.textContent=s.text; sec.appendChild(p);}
    d.appendChild(sec);}
  return d;}
function draw(){const body=document.getElementById('rows'); body.textContent='';
  const hits=ex.filter(match); let n=0;
  for(const e of hits){if(n>=limit)break; const tr=document.createElement('tr'); tr.className='ex';
    tr.dataset.run=e.r; tr.dataset.group=e.g; tr.dataset.id=e.id; tr.dataset.verdict=e.v;
    td(tr,n+1); td(tr,runs[e.r].model); td(tr,runs[e.r].dataset); td(tr,e.g); td(tr,e.y); td(tr,e.view.gold);
    td(tr,e.vl,MARK[e.v]||''); td(tr,e.view.premise,'txt'); td(tr,e.view.hypothesis,'txt'); const idx=n;
    tr.addEventListener('click',()=>{state.open=(String(state.open)===String(idx))?null:String(idx); write(); draw();});
    body.appendChild(tr);
    if(state.open!==undefined&&state.open!==null&&String(state.open)===String(n)){tr.classList.add('open');
      const dr=document.createElement('tr'); dr.className='detail-row'; dr.appendChild(detail(e)); body.appendChild(dr);}
    n++;}
  const total=ex.length;
  document.getElementById('count').textContent=hits.length+' of '+total+' examples match'+(hits.length>n?' (showing the first '+n+')':'');
  const more=document.getElementById('more'); more.hidden=hits.length<=n;}
document.getElementById('more').addEventListener('click',()=>{limit+=D.shown; draw();});
window.addEventListener('hashchange',()=>{read(); draw();});
read(); draw();
})();
"""
