"""One self-contained HTML page: the markup builder every page of the kata is made with, and
the document around it (graders.formats.grade_page, graders.interview.page).

- `Html` is markup the kata built; a plain `str` is text. `el` writes an element whose
  children and attribute values are escaped by `text` (graders.shared.untrusted.html_text)
  unless they are `Html` already, so nothing of the candidate's (a message, a file, a name, a
  record's field) can become a tag, an attribute, a link or a script: the one way text reaches
  a page is through `text`.
- `document` is the page: a Content-Security-Policy meta that allows nothing to be fetched,
  framed or submitted, and only the kata's own stylesheet and script, each named by its sha256
  (no 'unsafe-inline': an inline script or style attribute of anyone else's would not run).
- A page reads without JavaScript; the script only steps through snapshots (`[data-stepper]`)
  and sorts tables (`th[data-sort]`). Printed, code wraps instead of being cut (A4).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable

from graders.shared.untrusted import html_text


class Html(str):
    """Markup the kata built: every piece of text in it went through `text`."""


def text(value: object) -> Html:
    """`value` as text on the page: printable, and no markup of its own."""
    return Html(html_text(str(value)))


def join(*children) -> Html:
    """`children` one after the other (str escaped, Html kept, None left out, iterables
    flattened)."""
    return Html("".join(_pieces(children)))


def el(tag: str, *children, cls: str | None = None, **attrs) -> Html:
    """The element `<tag>` holding `children` (as `join` takes them). `attrs` are the kata's
    attribute names (a trailing underscore dropped, other underscores written as hyphens: `for_`,
    `data_step`); their values are escaped, True writes the attribute alone, None or False leaves
    it out. `tag` and the names are the kata's own, never the candidate's."""
    names = [("class", cls)] + [
        (name.rstrip("_").replace("_", "-"), value) for name, value in attrs.items()
    ]
    opening = "".join(
        f" {name}" if value is True else f' {name}="{text(value)}"'
        for name, value in names
        if value is not None and value is not False
    )
    if tag in _VOID:
        return Html(f"<{tag}{opening}>")
    return Html(f"<{tag}{opening}>{join(*children)}</{tag}>")


def document(title: str, body: Html, description: str = "") -> str:
    """The page: `title` (text), `body` (markup), the kata's stylesheet and script, and the
    policy that lets nothing else run or load."""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">'
        '<meta name="referrer" content="no-referrer">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{text(title)}</title>"
        + (el("meta", name="description", content=description) if description else "")
        + f"<style>{STYLE}</style></head>\n"
        f"<body>{body}\n<script>{SCRIPT}</script></body></html>\n"
    )


def _pieces(children) -> Iterable[str]:
    for child in children:
        if child is None:
            continue
        if isinstance(child, Html):
            yield child
        elif isinstance(child, str):
            yield text(child)
        else:
            yield from _pieces(child)


def _digest(source: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode()).digest()).decode() + "'"


_VOID = {"meta", "input", "br", "hr", "img", "link"}

STYLE = """
:root{--ink:#1f2328;--dim:#59636e;--line:#d1d9e0;--soft:#f6f8fa;--pass:#1a7f37;--fail:#cf222e;
--todo:#6e7781;--warn:#9a6700;--accent:#0969da;--add:#dafbe1;--del:#ffebe9;--hunk:#ddf4ff}
*{box-sizing:border-box}
body{margin:0 auto;max-width:1240px;padding:20px 24px 48px;color:var(--ink);
font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;padding-bottom:4px;
border-bottom:1px solid var(--line)}h3{font-size:15px;margin:16px 0 6px}
p{margin:6px 0}.dim{color:var(--dim)}a{color:var(--accent)}
.facts{display:flex;flex-wrap:wrap;gap:8px 20px;margin:10px 0;padding:0;list-style:none}
.facts li{background:var(--soft);border:1px solid var(--line);border-radius:6px;padding:6px 10px}
.facts b{display:block;font-size:11px;font-weight:600;color:var(--dim);text-transform:uppercase;
letter-spacing:.04em}
.badge{display:inline-block;border-radius:10px;padding:0 8px;font-size:12px;font-weight:600;
border:1px solid currentColor;white-space:nowrap}
.pass{color:var(--pass)}.fail,.error,.edited{color:var(--fail)}.timeout,.written{color:var(--warn)}
.not_attempted,.unknown{color:var(--todo)}.verified{color:var(--pass)}
.provenance{margin:8px 0;padding:8px 12px;border-left:4px solid var(--warn);background:#fff8c5}
.provenance.verified{border-color:var(--pass);background:#dafbe1;color:var(--ink)}
.provenance.edited{border-color:var(--fail);background:var(--del);color:var(--ink)}
table{border-collapse:collapse;width:100%;margin:6px 0}
th,td{text-align:left;vertical-align:top;padding:5px 8px;border-bottom:1px solid var(--line)}
th{font-size:12px;color:var(--dim);font-weight:600}
td.num,th.num{text-align:right;white-space:nowrap}
table.items,table.tells{table-layout:fixed}
.items th:nth-child(1),.tells th:nth-child(1){width:110px}
.items th:nth-child(2),.tells th:nth-child(2){width:330px}.items th:nth-child(3){width:70px}
th[data-sort]{cursor:pointer;user-select:none}th[data-sort]::after{content:" \\2195";opacity:.5}
.msg{white-space:pre-wrap;overflow-wrap:anywhere;font:12px/1.4 ui-monospace,SFMono-Regular,
Menlo,Consolas,monospace;margin:4px 0 0;color:var(--ink)}
details{margin:4px 0}summary{cursor:pointer;color:var(--dim)}
pre{margin:0;font:12px/1.45 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;tab-size:4}
.code,.diff{border:1px solid var(--line);border-radius:6px;background:var(--soft);
overflow:auto;max-height:640px;padding:6px 0}
.code>span,.diff>span{display:block;padding:0 10px;white-space:pre-wrap;overflow-wrap:anywhere;
min-height:1.45em}
.code{counter-reset:line}.code>span{padding-left:56px;text-indent:-46px}
.code>span::before{counter-increment:line;content:counter(line);display:inline-block;width:38px;
margin-right:8px;text-align:right;color:var(--todo);text-indent:0}
.diff .a,.code .a{background:var(--add)}.diff .d{background:var(--del)}.diff .h{background:var(--hunk);
color:var(--dim)}.diff .f{font-weight:600}
.columns{display:grid;grid-template-columns:minmax(260px,340px) 1fr;gap:16px;align-items:start}
.columns>*{min-width:0}
.pair{display:grid;grid-template-columns:1fr 1fr;gap:16px}.pair>*{min-width:0}
.answer{border:1px solid var(--line);border-radius:6px;padding:8px 10px;background:var(--soft)}
.verdict{list-style:none;padding:0;margin:0}.verdict li{padding:2px 0;display:flex;gap:6px;
align-items:baseline}.verdict .id{font-family:ui-monospace,monospace;font-size:12px}
.change{font-size:11px;font-weight:600}.change.new{color:var(--pass)}.change.lost{color:var(--fail)}
.events{margin:6px 0;padding-left:18px}.checklist{list-style:none;padding-left:4px}
.snapshot{border-top:2px solid var(--line);padding-top:8px;margin-top:18px;
scroll-margin-top:64px}
.snapshot>h3{display:flex;gap:10px;align-items:baseline;flex-wrap:wrap}
.stepper{display:none;position:sticky;top:0;z-index:2;background:#fff;padding:8px 0;
border-bottom:1px solid var(--line);align-items:center;gap:10px}
.js .stepper{display:flex}.js .snapshot:not(.current){display:none}
.js .snapshot{border-top:0;margin-top:6px}
.stepper button{font:inherit;padding:3px 12px;border:1px solid var(--line);border-radius:6px;
background:var(--soft);cursor:pointer}.stepper input{flex:1}
.stepper output{min-width:330px;font-variant-numeric:tabular-nums}
.timeline{width:100%;height:auto;display:block;border:1px solid var(--line);border-radius:6px}
.timeline text{font:11px system-ui,sans-serif;fill:var(--dim)}
.timeline .grid{stroke:var(--line);stroke-width:1}
.timeline .axis{stroke:var(--dim);stroke-width:1}
.timeline .score{fill:none;stroke:var(--accent);stroke-width:2}
.timeline .stage{stroke:var(--pass);stroke-width:1.5;stroke-dasharray:5 4}
.timeline .stage-label{fill:var(--pass);font-weight:600}
.timeline .end{stroke:var(--fail);stroke-width:1;stroke-dasharray:2 3}
.timeline .save circle{stroke:#fff;stroke-width:1.5}
.timeline .save.current circle{stroke:var(--ink);stroke-width:3}
.timeline .hint,.legend .hint{fill:var(--warn)}
.timeline .refused,.legend .refused{fill:var(--fail)}
.timeline .solution,.legend .solution{fill:#8250df}
svg .lv0{fill:var(--todo)}svg .lv1{fill:#bf8700}svg .lv2{fill:var(--accent)}
svg .lv3{fill:var(--pass)}
svg .lv4{fill:#8250df}
.badge.lv0{color:var(--todo)}.badge.lv1{color:#9a6700}.badge.lv2{color:var(--accent)}
.badge.lv3{color:var(--pass)}.badge.lv4{color:#8250df}
.legend{display:flex;flex-wrap:wrap;gap:14px;margin:4px 0;font-size:12px;color:var(--dim)}
.legend svg{vertical-align:middle}
@media (max-width:900px){.columns,.pair{grid-template-columns:1fr}}
@media print{
@page{size:A4;margin:14mm 12mm}
body{max-width:none;padding:0;font-size:11px}
.stepper,noscript{display:none!important}
.code,.diff{max-height:none;overflow:visible;border-color:#999}
.code>span,.diff>span{break-inside:avoid}
.columns,.pair{grid-template-columns:1fr}
a{color:inherit;text-decoration:none}
h2,h3{break-after:avoid}
}
"""

SCRIPT = """
(function(){
"use strict";
var root=document.documentElement;root.classList.add("js");
var stepper=document.querySelector("[data-stepper]");
if(stepper){
 var shots=Array.prototype.slice.call(document.querySelectorAll("section.snapshot"));
 var range=stepper.querySelector("input"),out=stepper.querySelector("output");
 var marks=document.querySelectorAll(".timeline .save");
 var current=-1;
 var show=function(n,fromHash){
  if(!shots.length)return;
  n=Math.max(0,Math.min(shots.length-1,n));
  if(current>=0)shots[current].classList.remove("current");
  current=n;shots[n].classList.add("current");
  range.value=String(n);out.textContent=shots[n].getAttribute("data-label");
  for(var i=0;i<marks.length;i++){marks[i].classList.toggle("current",
   marks[i].getAttribute("data-step")===String(n));}
  if(!fromHash&&history.replaceState){history.replaceState(null,"","#"+shots[n].id);}
 };
 var fromHash=function(){
  var id=decodeURIComponent(location.hash.slice(1));
  for(var i=0;i<shots.length;i++){if(shots[i].id===id){show(i,true);return true;}}
  return false;
 };
 range.max=String(Math.max(0,shots.length-1));
 stepper.querySelector("[data-go=prev]").addEventListener("click",function(){show(current-1);});
 stepper.querySelector("[data-go=next]").addEventListener("click",function(){show(current+1);});
 range.addEventListener("input",function(){show(parseInt(range.value,10));});
 document.addEventListener("keydown",function(e){
  if(e.target&&/INPUT|TEXTAREA|SELECT/.test(e.target.tagName)&&e.target!==range)return;
  if(e.key==="ArrowLeft"){show(current-1);e.preventDefault();}
  if(e.key==="ArrowRight"){show(current+1);e.preventDefault();}
 });
 window.addEventListener("hashchange",fromHash);
 if(!fromHash())show(0,true);
}
Array.prototype.forEach.call(document.querySelectorAll("th[data-sort]"),function(th){
 th.addEventListener("click",function(){
  var table=th.closest("table"),body=table.tBodies[0],key=th.getAttribute("data-sort");
  var down=th.getAttribute("aria-sort")!=="descending";
  Array.prototype.forEach.call(table.querySelectorAll("th[data-sort]"),function(o){
   o.removeAttribute("aria-sort");});
  th.setAttribute("aria-sort",down?"descending":"ascending");
  var rows=Array.prototype.slice.call(body.rows);
  rows.sort(function(a,b){
   var x=parseFloat(a.getAttribute("data-"+key)),y=parseFloat(b.getAttribute("data-"+key));
   return down?y-x:x-y;});
  rows.forEach(function(r){body.appendChild(r);});
 });
});
})();
"""

# Nothing may be fetched, framed, submitted or run but the kata's own style and script: every
# directive that could load anything falls back to default-src 'none'.
POLICY = (
    f"default-src 'none'; style-src {_digest(STYLE)}; script-src {_digest(SCRIPT)}; "
    "img-src 'none'; base-uri 'none'; form-action 'none'"
)
