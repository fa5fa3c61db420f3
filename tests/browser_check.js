// Opens an attention page in Debian's headless Chromium (via playwright-core) with the network
// cut off, and reports what a person would see.
// usage: node tests/browser_check.js PAGE.html SCREENSHOT.png
// stdout: JSON {"heatmaps": N, "requests": [urls other than the page], "title": ..., "tip": text}
const { chromium } = require("playwright-core");
const path = require("path");

(async () => {
  const [page_path, shot] = process.argv.slice(2);
  const url = "file://" + path.resolve(page_path);
  const browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const context = await browser.newContext({ offline: true, viewport: { width: 1400, height: 900 } });
  const page = await context.newPage();
  const requests = [];
  page.on("request", (r) => { if (r.url() !== url) requests.push(r.url()); });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(url);
  await page.waitForLoadState("load");
  const heatmaps = await page.locator("canvas.heatmap").count();
  // hover the cell (row 1, column 0) of the first heatmap and read the tooltip
  const box = await page.locator("canvas.heatmap").first().boundingBox();
  const info = await page.evaluate(() => {
    const d = JSON.parse(document.getElementById("attention-data").textContent);
    const c = document.querySelector("canvas.heatmap");
    return { cell: d.tokens.length <= 16 ? 22 : d.tokens.length <= 32 ? 16 : 12,
             margin: c.width - 2 - d.tokens.length * (d.tokens.length <= 16 ? 22 : d.tokens.length <= 32 ? 16 : 12) };
  });
  await page.mouse.move(box.x + info.margin + info.cell * 0.5, box.y + info.margin + info.cell * 1.5);
  const tip = await page.locator("#tip").textContent();
  await page.screenshot({ path: shot, fullPage: false });
  console.log(JSON.stringify({ heatmaps, requests, errors, title: await page.title(), tip }));
  await browser.close();
})().catch((e) => { console.error(String(e)); process.exit(1); });
