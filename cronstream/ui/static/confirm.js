// Forms with a data-confirm attribute ask before they are sent. The question is read as
// text (dataset), never evaluated: it may hold a DLQ record's topic name, which anyone
// who can write to a dead-lettered topic chooses. No inline handlers: the pages' CSP
// runs no inline script.
(function () {
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  });
})();
