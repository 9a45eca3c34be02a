"""Layout search: the layouts a search tries (:mod:`~simtrain.layout_search.candidates`), where
they run (:mod:`~simtrain.layout_search.executors`) and the simulated ranking
(:mod:`~simtrain.layout_search.simulated`). The closed form's own ranking is
:mod:`simtrain.analytic.search`; the verb is :func:`simtrain.api.search.search`."""
