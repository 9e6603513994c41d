"""kvkata's judge, its tracks and the worker side: read graders/README.md first."""
