// Small DOM helpers. Text always goes in as text nodes (never innerHTML), so names and
// values from the server cannot become markup.

/** Builds an element: `h("button", {class: "x", onclick}, "Text", child…)`. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2), value);
    } else if (key === "class") {
      el.className = value;
    } else if (value === true) {
      el.setAttribute(key, "");
    } else {
      el.setAttribute(key, String(value));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replaces the children of `el`. */
export function mount(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

let fieldCount = 0;
/** A labelled form field; `control` is an input/select/textarea element. */
export function field(label, control, hint) {
  fieldCount += 1;
  if (!control.id) control.id = `f${fieldCount}`;
  const hintEl = hint ? h("small", { id: `${control.id}-hint`, class: "hint" }, hint) : null;
  if (hintEl) control.setAttribute("aria-describedby", hintEl.id);
  return h("div", { class: "field" }, h("label", { for: control.id }, label), control, hintEl);
}

/** A checkbox with its label after it. */
export function checkbox(label, attrs = {}) {
  fieldCount += 1;
  const id = `c${fieldCount}`;
  const input = h("input", { type: "checkbox", id, ...attrs });
  return { input, el: h("div", { class: "check" }, input, h("label", { for: id }, label)) };
}

export function select(options, attrs = {}) {
  return h("select", attrs, options.map(([value, label, extra]) => h("option", { value, ...(extra || {}) }, label)));
}

/** A table; `columns` are [header, (row) => cell content]. Scrolls sideways on a phone. */
export function table(columns, rows, { caption, empty = "Nothing here yet." } = {}) {
  if (!rows.length) return h("p", { class: "muted" }, empty);
  return h("div", { class: "table-wrap" },
    h("table", {},
      caption ? h("caption", {}, caption) : null,
      h("thead", {}, h("tr", {}, columns.map(([title]) => h("th", { scope: "col" }, title)))),
      h("tbody", {}, rows.map((row) => h("tr", {}, columns.map(([, cell]) => h("td", {}, cell(row))))))));
}

/** A short message at the bottom of the screen, read out by screen readers. */
export function toast(message, kind = "info") {
  const box = document.getElementById("toasts");
  const el = h("div", { class: `toast ${kind}` }, message);
  box.append(el);
  setTimeout(() => el.remove(), kind === "error" ? 9000 : 5000);
}

/** An error shown in place (role=alert), for a form or a page. */
export function errorBox(error) {
  const text = error && error.message ? error.message : String(error);
  const code = error && error.code ? ` (${error.code})` : "";
  return h("div", { class: "error", role: "alert" }, text + code);
}

/**
 * Asks for confirmation in a modal dialog. With `typeToConfirm`, the user must type that
 * text (a database's name) before the button is enabled. Resolves true or false.
 */
export function confirmDialog({ title, message, action = "Confirm", danger = false, typeToConfirm }) {
  return new Promise((resolve) => {
    const input = typeToConfirm ? h("input", { type: "text", autocomplete: "off", spellcheck: "false" }) : null;
    const ok = h("button", { type: "submit", class: danger ? "danger" : "primary", disabled: !!typeToConfirm }, action);
    const cancel = h("button", { type: "button" }, "Cancel");
    const dialog = h("dialog", { "aria-labelledby": "dialog-title" },
      h("form", { method: "dialog" },
        h("h2", { id: "dialog-title" }, title),
        h("p", {}, message),
        input ? field(`Type ${typeToConfirm} to confirm`, input) : null,
        h("div", { class: "actions" }, cancel, ok)));
    if (input) input.addEventListener("input", () => { ok.disabled = input.value !== typeToConfirm; });
    let answered = false;
    const finish = (value) => {
      if (answered) return;
      answered = true;
      dialog.close();
      dialog.remove();
      resolve(value);
    };
    cancel.addEventListener("click", () => finish(false));
    dialog.addEventListener("cancel", () => finish(false));
    dialog.querySelector("form").addEventListener("submit", (e) => {
      e.preventDefault();
      finish(true);
    });
    document.body.append(dialog);
    dialog.showModal();
    (input || cancel).focus();
  });
}

/** A secret shown once, with a copy button. */
export function secretBox(label, secret) {
  const code = h("code", { class: "secret", "data-secret": "" }, secret);
  const copy = h("button", {
    type: "button",
    onclick: async () => {
      try {
        await navigator.clipboard.writeText(secret);
        toast("Copied.");
      } catch {
        toast("Select the text and copy it yourself.", "error");
      }
    },
  }, "Copy");
  return h("div", { class: "secret-box", role: "status" },
    h("p", {}, h("strong", {}, label), " — shown once: copy it now."), code, copy);
}

export function formatBytes(n) {
  if (n === null || n === undefined) return "—";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let v = Number(n);
  let i = 0;
  while (v >= 1000 && i < units.length - 1) {
    v /= 1000;
    i += 1;
  }
  return `${i === 0 ? v : v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}

export function formatNumber(n) {
  if (n === null || n === undefined) return "—";
  return Number(n).toLocaleString("en");
}

export function formatDate(text) {
  if (!text) return "—";
  const d = new Date(text);
  return Number.isNaN(d.getTime()) ? text : d.toLocaleString();
}

/** A button that runs `action` with itself disabled meanwhile; errors become toasts. */
export function actionButton(label, action, attrs = {}) {
  const button = h("button", { type: "button", ...attrs }, label);
  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      await action();
    } catch (e) {
      toast(`${e.message}${e.code ? ` (${e.code})` : ""}`, "error");
    } finally {
      button.disabled = false;
    }
  });
  return button;
}

/** A form whose submit runs `onSubmit(form)`; errors are shown in the form. */
export function form(attrs, children, onSubmit) {
  const errors = h("div", { class: "form-errors" });
  const el = h("form", { ...attrs, novalidate: false }, children, errors);
  el.addEventListener("submit", async (e) => {
    e.preventDefault();
    const submit = el.querySelector("[type=submit]");
    if (submit) submit.disabled = true;
    mount(errors);
    try {
      await onSubmit(el);
    } catch (error) {
      mount(errors, errorBox(error));
    } finally {
      if (submit) submit.disabled = false;
    }
  });
  return el;
}
