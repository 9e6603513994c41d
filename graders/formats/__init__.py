"""How a grade is shown and written: the terminal report and the contract's JSON (report),
the interviewer's scorecard (scorecard), JUnit XML (junit) and Gradescope's results (gradescope);
`outputs` writes the files a grade was asked for, each apart from the others; `causes` groups a
grade's failures by what explains them, for every format to say a cause once.

May import: graders.judge (a grade's result), graders.shared. Never a track."""
