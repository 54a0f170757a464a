"""The browser half of the web_console bench: Debian's chromium driven by Playwright.

    python3 web_console_browser.py URL TOKEN VMS RUNS

Signs in with TOKEN, then RUNS times opens /ui/vms in a fresh page (a new tab: a new
renderer, which compiles the app again) and takes, from the page's navigation start
(performance.now()), when the first row shows and when the list says it holds all VMS;
then reloads the page (the same tab, as F5 or a link from another page of the console) and
takes the same; then, on the loaded list filtered to one new name, POSTs that VM from the
page and takes when its row shows. Prints one JSON object.
"""

import json
import sys

from playwright.sync_api import sync_playwright

url, token, vms, runs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
TABLE = 'table[aria-label="Virtual machines"]'
out = {"first_row_ms": [], "all_ms": [], "reload_first_row_ms": [], "reload_all_ms": [],
       "watch_ms": [], "post_ms": []}

with sync_playwright() as p:
    browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=[
        "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
    # The console forbids eval (CSP); Playwright's predicates need it.
    context = browser.new_context(ignore_https_errors=True, bypass_csp=True)
    page = context.new_page()
    page.set_default_timeout(120_000)
    page.goto(url + "/ui/")
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    page.locator(TABLE).wait_for()
    page.close()
    for run in range(runs):
        page = context.new_page()
        page.set_default_timeout(120_000)
        page.goto(url + "/ui/vms", wait_until="commit")
        page.wait_for_function(f"document.querySelector('{TABLE} tbody a') !== null", polling="raf")
        out["first_row_ms"].append(page.evaluate("performance.now()"))
        # Each earlier run added its probe VM.
        total = vms + run
        page.wait_for_function(f"document.body.innerText.includes('of {total}')", polling="raf")
        out["all_ms"].append(page.evaluate("performance.now()"))
        page.reload(wait_until="commit")
        page.wait_for_function(f"document.querySelector('{TABLE} tbody a') !== null", polling="raf")
        out["reload_first_row_ms"].append(page.evaluate("performance.now()"))
        page.wait_for_function(f"document.body.innerText.includes('of {total}')", polling="raf")
        out["reload_all_ms"].append(page.evaluate("performance.now()"))
        # A VM made now: how long until the list shows it (the filter keeps it on screen).
        probe = f"probe-{run}"
        page.get_by_label("Filter by name").fill(probe)
        page.wait_for_function(f"!document.body.innerText.includes('of {total}')", polling="raf")
        timing = page.evaluate("""async (name) => {
            const session = await (await fetch('/ui/session')).json();
            const vm = {apiVersion: 'kubevirt.io/v1', kind: 'VirtualMachine', metadata: {name},
                        spec: {runStrategy: 'Halted', template: {spec: {domain: {devices: {}, memory: {guest: '64Mi'}}}}}};
            const shown = () => [...document.querySelectorAll('table[aria-label="Virtual machines"] a')]
                .some((a) => a.textContent === name);
            const t0 = performance.now();
            const res = await fetch('/apis/kubevirt.io/v1/namespaces/default/virtualmachines', {
                method: 'POST', body: JSON.stringify(vm),
                headers: {'Content-Type': 'application/json', 'X-CSRF-Token': session.csrfToken}});
            const posted = performance.now() - t0;
            if (res.status !== 201) throw new Error('POST ' + res.status + ' ' + await res.text());
            await new Promise((resolve) => {
                const check = () => shown() ? resolve() : requestAnimationFrame(check);
                check();
            });
            return {posted, shown: performance.now() - t0};
        }""", probe)
        out["post_ms"].append(timing["posted"])
        out["watch_ms"].append(timing["shown"])
        page.close()
    browser.close()
print(json.dumps(out))
